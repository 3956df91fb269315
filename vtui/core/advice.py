"""The seeds' rules of thumb for a flag set, as advice (not errors: vLLM accepts these flags, but they
cost something the user may not have meant). Shown beside the flag editor and by `vtui check`."""

from __future__ import annotations

from collections.abc import Mapping

from vtui.core.vllm_memory import MemoryRule

UTILIZATION_EDGE = 0.95


def flag_advice(flags: Mapping[str, object], rule: MemoryRule | None = None) -> list[str]:
    """One line per rule the flags run into, in the seeds' words: a squeezed KV pool, CUDA graphs left
    off, an fp8 KV cache whose output quality is unchecked. `rule`: the target vLLM's memory rule
    (`core.vllm_memory.memory_rule`); with 0.34's extensible KV cache a utilization is only a cap on a
    cache sized from measured memory, so a high one squeezes nothing and a set one is said to cost."""
    out = []
    util = flags.get("gpu-memory-utilization")
    if rule is not None and rule.extensible_kv:
        if rule.utilization_set and rule.utilization < 1.0:
            out.append(
                f"--gpu-memory-utilization {rule.utilization:g} caps vLLM {rule.version}'s extensible KV cache, "
                "which otherwise takes all memory left after warmup (unset means 1.0): keep it only when "
                "other processes share the GPU, else leave it unset for a larger cache."
            )
    elif isinstance(util, (int, float)) and not isinstance(util, bool) and util > UTILIZATION_EDGE:
        out.append(
            f"--gpu-memory-utilization {util:g} is above {UTILIZATION_EDGE}: it squeezes everything "
            "outside the KV pool; short-context tests look fine, long-context concurrency queues and "
            "hits OOM sooner. Leave about a tenth of the memory as headroom (0.90)."
        )
    if flags.get("enforce-eager") is True:
        out.append(
            "--enforce-eager turns CUDA graphs off (GPU builds): errors come earlier and readable, at "
            "the cost of throughput and first-token latency. Fine while debugging a start; turn it back "
            "off for a long run."
        )
    kv_dtype = flags.get("kv-cache-dtype")
    if isinstance(kv_dtype, str) and kv_dtype.startswith("fp8"):
        out.append(
            f"--kv-cache-dtype {kv_dtype} halves the KV cache's memory; check the outputs' quality "
            "against the auto dtype before relying on it."
        )
    return out
