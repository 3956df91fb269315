"""Who holds a port or a GPU, and which flag values to offer instead: the concrete half of a diagnosis
(diagnosis.py reads the lines, this module looks at the machine)."""

from __future__ import annotations

import math
import socket
from collections.abc import Collection, Iterable, Sequence

from vtui.core.vllm_memory import MemoryRule
from vtui.telemetry.gpu import GpuProcess, GpuSample

GiB = 1024**3


def port_holders(port: int) -> list[tuple[int, str]]:
    """(pid, process name) of whatever listens on `port`; [] when unknown (psutil may need privileges)."""
    try:
        import psutil
    except ImportError:
        return []
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, PermissionError, OSError):
        return []
    out: list[tuple[int, str]] = []
    for conn in conns:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            try:
                name = psutil.Process(conn.pid).name()
            except (psutil.Error, OSError):
                name = "?"
            if (conn.pid, name) not in out:
                out.append((conn.pid, name))
    return out


def free_port_after(port: int, host: str = "", tries: int = 50) -> int | None:
    """The first port above `port` that nothing listens on (checked by binding it for an instant)."""
    for candidate in range(port + 1, min(port + 1 + tries, 65536)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host if host not in ("0.0.0.0", "::") else "", candidate))
            except OSError:
                continue
            return candidate
    return None


def utilization_that_fits(free_gib: float, total_gib: float, margin: float = 0.02) -> float | None:
    """The largest --gpu-memory-utilization (2 decimals) that the free memory satisfies, with a margin;
    None when it would be too small to be useful."""
    if total_gib <= 0:
        return None
    value = math.floor((free_gib / total_gib - margin) * 100) / 100
    return value if value >= 0.1 else None


def gpu_holders(
    gpu: GpuSample | None,
    indices: Iterable[int] | None,
    *,
    instance: str | None = None,
    own_pids: Collection[int] = (),
) -> list[GpuProcess]:
    """Processes on the given GPUs (all when None) that are not this instance's, biggest first."""
    if gpu is None or not gpu.available:
        return []
    wanted = set(indices) if indices is not None else None
    procs = [
        p
        for p in gpu.processes
        if (wanted is None or p.gpu_index in wanted)
        and p.pid not in own_pids
        and (instance is None or p.instance != instance)
    ]
    return sorted(procs, key=lambda p: -(p.used_memory or 0))


def describe_holders(procs: Sequence[GpuProcess]) -> str:
    parts = []
    for p in procs:
        who = f"instance {p.instance!r}" if p.instance else "other"
        mem = f", {p.used_memory / GiB:.1f} GiB" if p.used_memory is not None else ""
        parts.append(f"PID {p.pid} on GPU {p.gpu_index} ({who}{mem})")
    return "; ".join(parts)


# The seeds' remedies for a KV cache too small for the load, in the seeds' order: first shorten the
# context (KV grows linearly with it), then give KV more memory, then fit the batch to the pool, then
# shrink each token's KV, then more hardware.
KV_SHORT_REMEDIES: tuple[tuple[str, str], ...] = (
    (
        "max-model-len",
        "lower --max-model-len to what requests really need (many 8B/32B workloads fit in "
        "8k-16k): KV per request grows with it, and what is saved becomes concurrency",
    ),
    (
        "gpu-memory-utilization",
        "raise --gpu-memory-utilization toward the stable edge (0.90-0.95; above 0.95 "
        "long-context bursts hit OOM sooner): it sizes the KV pool directly",
    ),
    (
        "max-num-seqs",
        "lower --max-num-seqs so the running batch fits the KV pool: requests then wait in the "
        "queue instead of being preempted and recomputed",
    ),
    ("kv-cache-dtype", "set --kv-cache-dtype fp8 to halve KV memory per token (check output quality)"),
    (
        "tensor-parallel-size",
        "quantize the weights, raise --tensor-parallel-size, or add a replica: more memory left for KV",
    ),
)


# With vLLM 0.34's extensible KV cache (core.vllm_memory.memory_rule) an unset utilization is already 1.0
# and the cache takes what is free after warmup: raising it is no remedy, what else holds memory is.
_EXTENSIBLE_FULL = (
    "gpu-memory-utilization",
    "the extensible KV cache already takes all memory left after the model, warmup and CUDA graphs "
    "(an unset --gpu-memory-utilization is 1.0 there): fewer or smaller CUDA-graph capture sizes, or fewer "
    "other processes on the GPU, leave it more",
)
_EXTENSIBLE_CAPPED = (
    "gpu-memory-utilization",
    "raise --gpu-memory-utilization, or leave it unset (1.0 with the extensible KV cache), unless other "
    "processes share the GPU: the cache gets what is left below it after warmup",
)


def kv_short_remedies(rule: MemoryRule | None = None) -> tuple[tuple[str, str], ...]:
    """The seeds' KV-short remedies as the target vLLM's memory rule reads them: with the extensible
    KV cache the utilization step says what raising it can still do (nothing when it is 1.0)."""
    if rule is None or not rule.extensible_kv:
        return KV_SHORT_REMEDIES
    step = _EXTENSIBLE_FULL if rule.utilization >= 1.0 else _EXTENSIBLE_CAPPED
    return tuple(
        step if flag == "gpu-memory-utilization" else (flag, text) for flag, text in KV_SHORT_REMEDIES
    )
