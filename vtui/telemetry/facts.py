"""`StartupFacts`, what a `vllm serve` startup log says about an instance, and the keys of `vtui diagnose
--json`'s facts. Read from a log by `vtui.telemetry.startup_log.parse_startup` (which re-exports both);
kept apart from its parsing rules (dozens of regular expressions, compiled at import) so that the
dashboard's first frame, which decodes the supervisor's facts, does not compile them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vtui.core.state import Phase

__all__ = ["FACT_KEYS", "StartupFacts", "memory_text"]

# The keys of `vtui diagnose --json` "facts", in order.
FACT_KEYS: tuple[str, ...] = (
    "vllm_version",
    "engine",
    "max_model_len",
    "model_weights_gib",
    "model_load_secs",
    "total_gpu_gib",
    "gpu_memory_utilization",
    "non_torch_gib",
    "activation_peak_gib",
    "available_kv_gib",
    "extended_kv_gib",
    "kv_cache_tokens",
    "num_gpu_blocks",
    "num_cpu_blocks",
    "max_concurrency",
    "max_concurrency_for_tokens",
    "kv_needed_gib",
    "estimated_max_model_len",
    "init_engine_secs",
    "cuda_graph_capture_secs",
    "torch_compile_secs",
)

# vLLM prints its memory figures in GiB rounded to 0.01 (`format_gib`): a printed 0.0 is under 0.005 GiB.
_ROUNDED_AWAY_MIB = 0.005 * 1024


def memory_text(gib: float) -> str:
    """A memory figure in the unit that fits it: "14.99 GiB" from 1 GiB, "512 MiB" / "1.6 MiB" below, so a
    small cache does not read "0 GiB". A figure that vLLM printed as 0.0 GiB reads "< 5 MiB": the log
    does not say more."""
    if abs(gib) >= 1:
        return f"{round(gib, 2):g} GiB"
    if gib == 0:
        return f"< {_ROUNDED_AWAY_MIB:.0f} MiB"
    mib = gib * 1024
    return f"{mib:.3g} MiB" if abs(mib) < 100 else f"{mib:.0f} MiB"


@dataclass(frozen=True)
class StartupFacts:
    """What a startup log says about an instance; None where the log does not say."""

    vllm_version: str | None = None
    engine: str | None = None  # "V0" / "V1"
    max_model_len: int | None = None
    model_weights_gib: float | None = None
    total_gpu_gib: float | None = None
    gpu_memory_utilization: float | None = None
    non_torch_gib: float | None = None
    activation_peak_gib: float | None = None
    available_kv_gib: float | None = None
    # vLLM 0.34's extensible KV cache, grown after warmup: "Extended KV cache to N blocks (X GiB)"
    extended_kv_gib: float | None = None
    kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    num_cpu_blocks: int | None = None
    max_concurrency: float | None = None
    max_concurrency_for_tokens: int | None = None
    kv_needed_gib: float | None = None
    estimated_max_model_len: int | None = None
    init_engine_secs: float | None = None
    cuda_graph_capture_secs: float | None = None
    torch_compile_secs: float | None = None
    model_load_secs: float | None = None
    model: str | None = None
    non_default_args: Mapping[str, object] | None = None  # V1's "non-default args: {...}"
    args: Mapping[str, object] | None = None  # V0's "args: Namespace(...)": every argument
    phase: Phase | None = None

    def to_json(self) -> dict[str, object]:
        """The `vtui diagnose --json` facts: the FACT_KEYS the log gave, nothing else."""
        return {k: getattr(self, k) for k in FACT_KEYS if getattr(self, k) is not None}

    @property
    def kv_memory_bytes(self) -> int | None:
        """The KV budget per GPU in bytes: exact from --kv-cache-memory-bytes when the launch args carry
        it, else the logged GiB figure (vLLM rounds it to 0.01 GiB, ± 5 MiB), else None."""
        given = self.arg("kv_cache_memory_bytes")
        if isinstance(given, int) and not isinstance(given, bool):
            return given
        return int(round(self.available_kv_gib * 2**30)) if self.available_kv_gib is not None else None

    @property
    def kv_memory_exact(self) -> bool:
        """True when `kv_memory_bytes` is the exact byte count the instance was given."""
        given = self.arg("kv_cache_memory_bytes")
        return isinstance(given, int) and not isinstance(given, bool)

    def arg(self, name: str) -> object | None:
        """A launch argument (snake_case) from the non-default args, else V0's Namespace dump."""
        for source in (self.non_default_args, self.args):
            if source and name in source:
                return source[name]
        return None
