"""The seeds' two presets, scaled to an instance's GPUs and model (pure functions, no Textual).

A (throughput-first, seed: TP4, 0.92, 8k ctx, 65536 batched tokens, 512 seqs, chunked prefill) and
B (latency-first, seed: TP2, 0.88, 8k ctx, 4096 batched tokens, 128 seqs). The seed figures are per
their GPU count, so batch sizes scale per GPU; tensor-parallel-size follows the pinned GPUs. Where the
instance's vLLM has `--performance-mode` (0.32 does: vllm/config/vllm.py, balanced / interactivity /
throughput), A sets throughput and B interactivity.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtui.core.flagspec import BUILTIN_FLAGS, FlagTable
from vtui.core.model import FlagValue, InstanceSpec
from vtui.telemetry.flagschema import known_schema


@dataclass(frozen=True)
class Preset:
    key: str
    title: str
    summary: str


PRESETS = (
    Preset("A", "throughput-first", "big batches, memory squeezed: util 0.92, chunked prefill, many seqs"),
    Preset("B", "latency-first", "small prefill batches, fewer seqs, util 0.88 for headroom"),
)


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def preset_flags(
    key: str, spec: InstanceSpec, model_max_len: int | None = None, table: FlagTable | None = None
) -> dict[str, FlagValue]:
    """The flags preset `key` sets on `spec` (merged over its current flags by the caller). `table`: the
    instance's vLLM's flags (default: the schema already read for it, else the bundled one)."""
    if table is None:
        schema = known_schema(spec.engine, spec.command)
        table = schema.flags if schema is not None else BUILTIN_FLAGS
    n = max(1, len(spec.gpus))
    pp = spec.flags.get("pipeline-parallel-size", 1)
    tp = n // pp if isinstance(pp, int) and pp > 0 and n % pp == 0 else n
    ctx = 8192 if model_max_len is None else min(8192, model_max_len)
    if key.upper() == "A":
        flags: dict[str, FlagValue] = {
            "gpu-memory-utilization": 0.92,
            "max-model-len": ctx,
            "max-num-batched-tokens": _clamp(16384 * n, 8192, 65536),
            "max-num-seqs": _clamp(128 * n, 128, 512),
            "enable-chunked-prefill": True,
        }
    elif key.upper() == "B":
        flags = {
            "gpu-memory-utilization": 0.88,
            "max-model-len": ctx,
            "max-num-batched-tokens": _clamp(2048 * n, 2048, 4096),
            "max-num-seqs": _clamp(64 * n, 32, 128),
        }
    else:
        raise KeyError(key)
    mode = table.get("performance-mode")
    wanted = "throughput" if key.upper() == "A" else "interactivity"
    if mode is not None and mode.choices is not None and wanted in mode.choices:
        flags["performance-mode"] = wanted
    if spec.gpus:
        flags["tensor-parallel-size"] = tp
    return flags


def apply_preset(key: str, spec: InstanceSpec, model_max_len: int | None = None) -> InstanceSpec:
    return spec.with_flags(preset_flags(key, spec, model_max_len))
