"""A model's shape as the planner needs it, read from a local `config.json` (a folder, a file, or a
Hugging Face cache snapshot already on disk) — never from the network.

`ModelConfig` holds only what decides memory: layer count, attention layout (GQA, MLA, sliding
window per layer), parameter shapes (for a weight estimate when no weight files are present) and
the dtype / quantization the checkpoint declares.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Keys under which configs spell the same thing (first found wins).
_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "model_max_length",
)


class ModelConfigError(ValueError):
    """The config could not be found or does not describe a decoder the planner understands."""


@dataclass(frozen=True)
class ModelConfig:
    """Memory-relevant facts of one model (all per whole model, before any parallel split)."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int = 32000
    intermediate_size: int = 0
    dtype: str = "bfloat16"  # the checkpoint's torch_dtype
    max_position_embeddings: int = 4096  # vLLM's derived max_model_len (rope scaling applied)
    model_type: str = ""
    tie_word_embeddings: bool = False
    # MLA (DeepSeek-V2/V3, Kimi-K2): one compressed latent + rope key per token per layer.
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    # Sliding window: the window, and per layer "full" or "sliding" (empty = all full).
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    # Mixture of experts (0 experts = dense).
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    first_k_dense_layers: int = 0
    # Quantization declared by the checkpoint: "awq", "gptq", "fp8", "compressed-tensors", ... and bits.
    quantization: str | None = None
    quant_bits: int | None = None
    # Bytes of weight files found next to the config (exact when present), else None.
    weights_file_bytes: int | None = None
    source: str | None = None
    raw: Mapping[str, object] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def sliding_layers(self) -> int:
        return sum(1 for t in self.layer_types if t == "sliding")

    @property
    def is_hybrid(self) -> bool:
        """Some, but not all, layers use a sliding window."""
        return 0 < self.sliding_layers < self.num_layers


def _first(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def _derived_max_len(cfg: Mapping[str, Any]) -> int:
    """vLLM 0.32's derived max_model_len: the position limit, times the rope-scaling factor except for
    rope types whose config already states the extended length (yarn, llama3, longrope, ...) and Gemma-3."""
    length = int(_first(cfg, *_LEN_KEYS, default=2048))
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if isinstance(scaling, Mapping) and "gemma3" not in str(cfg.get("model_type", "")):
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        factor = scaling.get("factor")
        if factor and kind not in (
            "su",
            "longrope",
            "llama3",
            "yarn",
            "deepseek_yarn",
            "deepseek_llama_scaling",
            "default",
        ):
            length = int(length * float(factor))
    return length


def _layer_types(cfg: Mapping[str, Any], n_layers: int, window: int | None) -> tuple[str, ...]:
    """Which layers attend through a sliding window, following the conventions vLLM reads."""
    if not window:
        return ()
    explicit = cfg.get("layer_types")
    if isinstance(explicit, list) and len(explicit) == n_layers:
        return tuple("sliding" if "sliding" in str(t) else "full" for t in explicit)
    if cfg.get("use_sliding_window") is False:
        return ()
    model_type = str(cfg.get("model_type", ""))
    if model_type.startswith("gemma2"):
        return tuple("sliding" if i % 2 == 0 else "full" for i in range(n_layers))
    if model_type.startswith("gemma3"):
        pattern = int(cfg.get("sliding_window_pattern") or 6)
        return tuple("full" if (i + 1) % pattern == 0 else "sliding" for i in range(n_layers))
    if cfg.get("use_sliding_window") and cfg.get("max_window_layers") is not None:
        first = int(cfg["max_window_layers"])  # Qwen2 convention: layers from here on slide
        return tuple("sliding" if i >= first else "full" for i in range(n_layers))
    return tuple("sliding" for _ in range(n_layers))  # e.g. Mistral-7B-v0.1: every layer


def _weight_file_bytes(folder: Path) -> int | None:
    """Total size of the checkpoint's weight files (the safetensors index states it exactly)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
            if total:
                return int(total)
        except (OSError, ValueError):
            pass
    files = [p for p in folder.glob("*.safetensors") if p.is_file()]
    if not files:
        files = [p for p in folder.glob("*.bin") if p.is_file() and "training_args" not in p.name]
    if not files:
        return None
    return sum(p.stat().st_size for p in files)


def from_dict(
    cfg: Mapping[str, object],
    name: str = "model",
    *,
    weights_file_bytes: int | None = None,
    source: str | None = None,
) -> ModelConfig:
    """Build a ModelConfig from a parsed config.json (multimodal configs: their `text_config`)."""
    outer = dict(cfg)
    text = outer.get("text_config") or outer.get("llm_config")
    merged: dict[str, Any] = {**outer, **text} if isinstance(text, Mapping) else outer
    if isinstance(text, Mapping) and "model_type" in text:
        merged["model_type"] = text["model_type"]
    try:
        n_layers = int(_first(merged, "num_hidden_layers", "n_layer", "num_layers"))
        hidden = int(_first(merged, "hidden_size", "n_embd", "d_model"))
        heads = int(_first(merged, "num_attention_heads", "n_head", "num_heads"))
    except TypeError as exc:
        raise ModelConfigError(f"{name}: config.json lacks layer/hidden/head counts") from exc
    kv_heads = int(_first(merged, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads))
    head_dim = int(_first(merged, "head_dim", default=0) or hidden // heads)
    window = merged.get("sliding_window")
    window = int(window) if isinstance(window, (int, float)) and window > 0 else None
    types = _layer_types(merged, n_layers, window)
    if types and "sliding" not in types:
        window = None
    qcfg = merged.get("quantization_config") or {}
    quant = str(qcfg.get("quant_method")).lower() if isinstance(qcfg, Mapping) and qcfg else None
    bits = qcfg.get("bits") if isinstance(qcfg, Mapping) else None
    if bits is None and isinstance(qcfg, Mapping) and isinstance(qcfg.get("config_groups"), Mapping):
        # compressed-tensors: the weights' width is per scheme group (W4A16, W8A8, ...); the widest wins
        widths = [
            g["weights"].get("num_bits")
            for g in qcfg["config_groups"].values()
            if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)
        ]
        bits = max((w for w in widths if isinstance(w, int)), default=None)
    experts = int(_first(merged, "n_routed_experts", "num_local_experts", "num_experts", default=0) or 0)
    return ModelConfig(
        name=name,
        num_layers=n_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=int(_first(merged, "vocab_size", "padded_vocab_size", default=32000)),
        intermediate_size=int(_first(merged, "intermediate_size", "ffn_dim", "n_inner", default=4 * hidden)),
        dtype=str(_first(merged, "torch_dtype", "dtype", default="bfloat16")).replace("torch.", ""),
        max_position_embeddings=_derived_max_len(merged),
        model_type=str(merged.get("model_type", "")),
        tie_word_embeddings=bool(outer.get("tie_word_embeddings", merged.get("tie_word_embeddings", False))),
        kv_lora_rank=merged.get("kv_lora_rank"),
        qk_rope_head_dim=merged.get("qk_rope_head_dim"),
        q_lora_rank=merged.get("q_lora_rank"),
        qk_nope_head_dim=merged.get("qk_nope_head_dim"),
        v_head_dim=merged.get("v_head_dim"),
        sliding_window=window if types else None,
        layer_types=types,
        num_experts=experts,
        num_experts_per_tok=int(_first(merged, "num_experts_per_tok", "moe_topk", default=0) or 0),
        moe_intermediate_size=int(_first(merged, "moe_intermediate_size", default=0) or 0),
        num_shared_experts=int(_first(merged, "n_shared_experts", "num_shared_experts", default=0) or 0),
        first_k_dense_layers=int(_first(merged, "first_k_dense_replace", default=0) or 0),
        quantization=quant,
        quant_bits=int(bits) if isinstance(bits, (int, float)) else None,
        weights_file_bytes=weights_file_bytes,
        source=source,
        raw=outer,
    )


def hf_cache_root() -> Path:
    """The Hugging Face hub cache folder ($HF_HUB_CACHE, $HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def find_config(model: str | os.PathLike[str], cache_root: Path | None = None) -> Path:
    """The config.json for a folder, a file, or an HF id cached on disk (`org/name` → the snapshot
    named by refs/main, else the newest one). Raises ModelConfigError when none is on disk."""
    path = Path(os.path.expanduser(str(model)))
    if path.is_file():
        return path
    if (path / "config.json").is_file():
        return path / "config.json"
    repo = str(model).strip("/")
    if repo.count("/") == 1 and not path.exists():
        folder = (cache_root or hf_cache_root()) / ("models--" + repo.replace("/", "--"))
        snapshots = folder / "snapshots"
        ref = folder / "refs" / "main"
        candidates: list[Path] = []
        if ref.is_file():
            candidates.append(snapshots / ref.read_text().strip() / "config.json")
        if snapshots.is_dir():
            candidates += sorted(
                snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True
            )
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        raise ModelConfigError(
            f"{model}: no config.json in the Hugging Face cache ({folder}); "
            "vtui never downloads — pass a local folder"
        )
    raise ModelConfigError(f"{model}: no config.json found")


def load_model_config(model: str | os.PathLike[str], cache_root: Path | None = None) -> ModelConfig:
    """Read a model's config.json from disk (folder, file, or HF cache snapshot) into a ModelConfig."""
    path = find_config(model, cache_root)
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelConfigError(f"{path}: {exc}") from exc
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{path}: not a JSON object")
    return from_dict(
        cfg, name=str(model), weights_file_bytes=_weight_file_bytes(path.parent), source=str(path)
    )


def model_config_for(
    engine: str, model: str, sim_params: str | None = None
) -> tuple[ModelConfig | None, str | None]:
    """(config, None) or (None, why not), for an instance: its config.json on disk (a folder or a Hugging
    Face cache snapshot), else, for the simulated engine, the shape in the sim's built-in table. Blocking
    (reads files): the UI calls it in a thread."""
    try:
        return load_model_config(model), None
    except ModelConfigError as exc:
        reason = str(exc)
    except OSError as exc:
        reason = f"{model}: {exc}"
    if engine != "sim":
        return None, reason
    from vtui.sim.models import resolve  # the sim's table of model shapes (imported only for sim instances)

    try:
        shape = resolve(model, sim_params)
    except (ValueError, OSError) as exc:
        return None, f"{model}: {exc}"
    if shape is None:
        return None, f"{model}: not in the sim's built-in table and no config.json on disk"
    return from_dict(shape.config_json(), name=model, source="sim built-in table"), None


def over_model_limit(config: ModelConfig, max_model_len: int | None) -> str | None:
    """Why `max-model-len` cannot start on this model (past its derived context limit: vLLM refuses to
    start), or None. The one statement of the rule, for the planner and `vtui check`."""
    if max_model_len is None or max_model_len <= 0 or max_model_len <= config.max_position_embeddings:
        return None
    return (
        f"max-model-len {max_model_len} > the model's limit {config.max_position_embeddings}: "
        "vLLM refuses to start (unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)"
    )
