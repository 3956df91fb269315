"""The simulated model's shape (layers, KV heads, head dim, parameters, context limit): read from the model
folder's config.json when there is one, else from a small table of well-known models, else `--sim-params`.
The KV arithmetic and the speed model only need these few numbers.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from vtui.core.vllm_memory import DTYPE_BYTES


@dataclass(frozen=True)
class ModelShape:
    name: str
    architecture: str = "LlamaForCausalLM"
    layers: int = 32
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    intermediate: int = 14336
    vocab: int = 128256
    params: float = 8.03e9
    max_position: int = 131072
    dtype: str = "bfloat16"  # the checkpoint's torch_dtype
    from_config: bool = False
    tie_word_embeddings: bool = False  # the LM head shares the embedding matrix (small models)

    def config_json(self) -> dict[str, object]:
        """This shape as the config.json keys a model's own would state (for the planner)."""
        return {
            "architectures": [self.architecture],
            "num_hidden_layers": self.layers,
            "hidden_size": self.hidden,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate,
            "vocab_size": self.vocab,
            "torch_dtype": self.dtype,
            "max_position_embeddings": self.max_position,
            "tie_word_embeddings": self.tie_word_embeddings,
        }


def _llama(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv: int,
    hd: int,
    inter: int,
    vocab: int,
    params: float,
    max_pos: int,
    arch: str = "LlamaForCausalLM",
    dtype: str = "bfloat16",
    tied: bool = False,
) -> ModelShape:
    return ModelShape(
        name,
        arch,
        layers,
        hidden,
        heads,
        kv,
        hd,
        inter,
        vocab,
        params,
        max_pos,
        dtype,
        tie_word_embeddings=tied,
    )


# Lower-case HF ids; matched by suffix so `/models/Qwen3-8B` and `Qwen/Qwen3-8B` both resolve.
BUILTIN: dict[str, ModelShape] = {
    s.name.lower(): s
    for s in (
        _llama("meta-llama/Llama-3.1-8B-Instruct", 32, 4096, 32, 8, 128, 14336, 128256, 8.03e9, 131072),
        _llama("meta-llama/Llama-3.1-70B-Instruct", 80, 8192, 64, 8, 128, 28672, 128256, 70.55e9, 131072),
        _llama(
            "meta-llama/Llama-3.2-1B-Instruct", 16, 2048, 32, 8, 64, 8192, 128256, 1.24e9, 131072, tied=True
        ),
        _llama(
            "Qwen/Qwen3-0.6B", 28, 1024, 16, 8, 128, 3072, 151936, 0.6e9, 40960, "Qwen3ForCausalLM", tied=True
        ),
        _llama("Qwen/Qwen3-8B", 36, 4096, 32, 8, 128, 12288, 151936, 8.19e9, 40960, "Qwen3ForCausalLM"),
        _llama("Qwen/Qwen3-32B", 64, 5120, 64, 8, 128, 25600, 151936, 32.8e9, 40960, "Qwen3ForCausalLM"),
        _llama(
            "Qwen/Qwen2.5-0.5B-Instruct",
            *(24, 896, 14, 2, 64, 4864, 151936, 0.49e9, 32768, "Qwen2ForCausalLM"),
            tied=True,
        ),
        _llama(
            "Qwen/Qwen2.5-7B-Instruct", 28, 3584, 28, 4, 128, 18944, 152064, 7.62e9, 32768, "Qwen2ForCausalLM"
        ),
        _llama(
            "mistralai/Mistral-7B-Instruct-v0.3",
            32,
            4096,
            32,
            8,
            128,
            14336,
            32768,
            7.25e9,
            32768,
            "MistralForCausalLM",
        ),
        _llama("vtui/tiny-llama", 2, 128, 4, 2, 32, 256, 1300, 6.4e5, 2048, dtype="float32"),
    )
}


def params_from_text(text: str) -> float:
    """`8B`, `70b`, `500M`, `6.4e5` → a parameter count."""
    m = re.fullmatch(r"\s*([\d.]+(?:e\d+)?)\s*([kKmMbBtT]?)\s*", str(text))
    if not m:
        raise ValueError(f"invalid --sim-params value: {text!r} (e.g. 8B, 500M)")
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2).lower()]
    return float(m.group(1)) * scale


def shape_for_params(name: str, params: float) -> ModelShape:
    """The built-in model nearest in size to `params`, its layer count scaled to match (TP-friendly heads)."""
    templates = [t for t in BUILTIN.values() if t.params >= 1e8]
    base = min(templates, key=lambda t: abs(math.log(params / t.params)))
    layers = max(2, int(round(base.layers * params / base.params)))
    return replace(base, name=name, layers=layers, params=params, max_position=32768)


def estimate_params(cfg: dict) -> float:
    hidden = int(cfg.get("hidden_size", 4096))
    layers = int(cfg.get("num_hidden_layers", 32))
    heads = int(cfg.get("num_attention_heads", 32))
    kv = int(cfg.get("num_key_value_heads") or heads)
    hd = int(cfg.get("head_dim") or hidden // heads)
    inter = int(cfg.get("intermediate_size", 4 * hidden))
    vocab = int(cfg.get("vocab_size", 32000))
    experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 1)
    attn = 2 * hidden * heads * hd + 2 * hidden * kv * hd
    mlp = 3 * hidden * inter * experts
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    return float(layers * (attn + mlp + 2 * hidden) + embed)


def shape_from_config(name: str, folder: Path) -> ModelShape:
    cfg = json.loads((folder / "config.json").read_text())
    cfg = {**cfg.get("text_config", {}), **cfg} if "text_config" in cfg and "hidden_size" not in cfg else cfg
    heads = int(cfg.get("num_attention_heads", 32))
    hidden = int(cfg.get("hidden_size", 4096))
    params = estimate_params(cfg)
    index = folder / "model.safetensors.index.json"
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    if index.exists():
        try:
            total = json.loads(index.read_text())["metadata"]["total_size"]
            params = float(total) / DTYPE_BYTES.get(dtype, 2)
        except (KeyError, ValueError, TypeError):
            pass
    return ModelShape(
        name=name,
        architecture=(cfg.get("architectures") or ["LlamaForCausalLM"])[0],
        layers=int(cfg.get("num_hidden_layers", 32)),
        hidden=hidden,
        heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        intermediate=int(cfg.get("intermediate_size", 4 * hidden)),
        vocab=int(cfg.get("vocab_size", 32000)),
        params=params,
        max_position=int(cfg.get("max_position_embeddings", 2048)),
        dtype=dtype,
        from_config=True,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )


def lookup_builtin(model: str) -> ModelShape | None:
    key = model.rstrip("/").lower()
    if key in BUILTIN:
        return replace(BUILTIN[key], name=model)
    base = key.rsplit("/", 1)[-1]
    for full, shape in BUILTIN.items():
        if key.endswith(full) or full.endswith("/" + base) or (base == "tiny" and "tiny" in full):
            return replace(shape, name=model)
    return None


def start_refusal(model: str, sim_params: str | None = None) -> str | None:
    """Why `vtui sim MODEL` fails at once (vLLM's hub lookup refuses the name: a path that is no folder
    with config.json, or a bare word), None when it starts: a known or sized model, or any `org/name`
    (simulated at 8B parameters). `vtui check` and the sim's start share it."""
    if resolve(model, sim_params) is not None:
        return None
    if model.startswith(("/", ".", "~")) or model.count("/") != 1:
        return (
            f"the sim knows no model {model!r}, and it is neither a folder with config.json nor a "
            "Hugging Face id like org/name: the start would fail (HFValidationError); use a known "
            "name or give its size with the sim-params flag"
        )
    return None


def resolve(model: str, sim_params: str | None = None) -> ModelShape | None:
    """The shape of `model`; None when it is neither a folder with config.json, a known name, nor sized."""
    folder = Path(model).expanduser()
    if (folder / "config.json").is_file():
        return shape_from_config(model, folder)
    if sim_params:
        return shape_for_params(model, params_from_text(sim_params))
    return lookup_builtin(model)
