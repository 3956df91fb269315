"""One place where the UI imports its sibling packages' types, with thin stand-ins while those land.

Everything the UI reads from the supervisor and telemetry is a frozen dataclass defined by its owner;
until an owner's module is importable we define a compatible stand-in here (same field names as
notes/API.md), so screens and tests depend on this module only and switch over without edits.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from vtui.core.model import InstanceSpec, Layout
from vtui.core.state import Phase, State

# -- supervisor ------------------------------------------------------------------------------------
try:
    from vtui.core.supervisor import InstanceStatus, PreflightError, Supervisor  # type: ignore
except ImportError:  # pragma: no cover - until the supervisor lands
    Supervisor = None  # type: ignore[assignment,misc]

    class PreflightError(Exception):  # type: ignore[no-redef]
        def __init__(self, problems: list[str]) -> None:
            super().__init__("; ".join(problems))
            self.problems = problems

    @dataclass(frozen=True)
    class InstanceStatus:  # type: ignore[no-redef]
        name: str
        spec: InstanceSpec
        state: State
        phase: Phase | None = None
        pid: int | None = None
        started_at: float | None = None
        restarts: int = 0
        last_error: str | None = None
        log_path: Path | None = None
        adopted: bool = False
        last_good_spec: InstanceSpec | None = None
        next_restart_at: float | None = None


# -- telemetry: metrics ----------------------------------------------------------------------------
try:
    from vtui.telemetry.metrics import MetricsSample, Percentiles  # type: ignore
except ImportError:  # pragma: no cover
    @dataclass(frozen=True)
    class Percentiles:  # type: ignore[no-redef]
        p50: float | None = None
        p95: float | None = None
        p99: float | None = None

    _NO_P = Percentiles()

    @dataclass(frozen=True)
    class MetricsSample:  # type: ignore[no-redef]
        instance: str | None
        at: float
        running: float | None = None
        waiting: float | None = None
        waiting_by_reason: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
        kv_usage: float | None = None
        kv_capacity_tokens: int | None = None
        block_size: int | None = None
        prompt_tps: float | None = None
        generation_tps: float | None = None
        ttft: Percentiles = _NO_P
        itl: Percentiles = _NO_P
        e2e: Percentiles = _NO_P
        queue: Percentiles = _NO_P
        preemptions_per_s: float | None = None
        prefix_hit_rate: float | None = None
        success_per_s: float | None = None
        abort_per_s: float | None = None
        error_per_s: float | None = None
        prompt_tokens_total: float | None = None
        generation_tokens_total: float | None = None
        preemptions_total: float | None = None
        prefix_cache_queries_total: float | None = None
        prefix_cache_hits_total: float | None = None
        counter_reset: bool = False
        vllm_names: str | None = None


def scrape_loop_class() -> Any | None:
    """telemetry.scrape.ScrapeLoop, or None while it has not landed (the dashboard then shows `--`)."""
    try:
        from vtui.telemetry.scrape import ScrapeLoop  # type: ignore
    except ImportError:
        return None
    return ScrapeLoop


# -- telemetry: GPU --------------------------------------------------------------------------------
try:
    from vtui.telemetry.gpu import GpuInfo, GpuProcess, GpuSample  # type: ignore
except ImportError:  # pragma: no cover
    @dataclass(frozen=True)
    class GpuInfo:  # type: ignore[no-redef]
        index: int
        name: str
        memory_used: int | None = None
        memory_total: int | None = None
        utilization: float | None = None
        temperature: float | None = None
        power_w: float | None = None
        power_limit_w: float | None = None

    @dataclass(frozen=True)
    class GpuProcess:  # type: ignore[no-redef]
        gpu_index: int
        pid: int
        used_memory: int | None
        instance: str | None

    @dataclass(frozen=True)
    class GpuSample:  # type: ignore[no-redef]
        available: bool
        reason: str | None
        gpus: tuple = ()
        processes: tuple = ()
        at: float = 0.0


def gpu_sampler_class() -> Any | None:
    try:
        from vtui.telemetry.gpu import GpuSampler  # type: ignore
    except ImportError:
        return None
    return GpuSampler


# -- telemetry: startup facts and diagnosis --------------------------------------------------------
try:
    from vtui.telemetry.startup_log import StartupFacts, parse_startup  # type: ignore
except ImportError:  # pragma: no cover
    @dataclass(frozen=True)
    class StartupFacts:  # type: ignore[no-redef]
        kv_cache_tokens: int | None = None
        num_gpu_blocks: int | None = None
        max_concurrency: float | None = None
        max_model_len: int | None = None
        weights_gib: float | None = None
        load_time_s: float | None = None
        compile_time_s: float | None = None
        graph_capture_time_s: float | None = None
        phase: Phase | None = None

    def parse_startup(lines: Iterable[str]) -> StartupFacts:  # type: ignore[misc]
        return StartupFacts()

try:
    from vtui.telemetry.diagnosis import Problem, diagnose  # type: ignore
except ImportError:  # pragma: no cover
    @dataclass(frozen=True)
    class Problem:  # type: ignore[no-redef]
        kind: str
        message: str
        fix: Mapping[str, object] | None = None
        explanation: str = ""

    def diagnose(lines: Iterable[str], facts: Any = None) -> list[Problem]:  # type: ignore[misc]
        from vtui.core.phases import root_cause

        cause = root_cause(list(lines))
        return [Problem("error", cause, None, "")] if cause else []


def fact(facts: Any, *names: str) -> Any:
    """The first non-None attribute among `names` (StartupFacts field names vary by version)."""
    for name in names:
        value = getattr(facts, name, None) if facts is not None else None
        if value is not None:
            return value
    return None


def kv_tokens_of(facts: Any) -> int | None:
    return fact(facts, "kv_cache_tokens", "kv_tokens", "gpu_kv_cache_tokens")


def max_concurrency_of(facts: Any) -> float | None:
    return fact(facts, "max_concurrency", "maximum_concurrency")


# -- flag schema -----------------------------------------------------------------------------------
try:
    from vtui.core.flagspec import BUILTIN_FLAGS, SEED_FLAGS, FlagSpec, validate_flag  # type: ignore
    try:
        from vtui.core.flagspec import parse_flag_value  # type: ignore
    except ImportError:  # pragma: no cover
        parse_flag_value = None  # type: ignore[assignment]
except ImportError:  # pragma: no cover
    @dataclass(frozen=True)
    class FlagSpec:  # type: ignore[no-redef]
        name: str
        type: str
        choices: tuple[str, ...] | None = None
        default: object = None
        help: str = ""
        aliases: tuple[str, ...] = ()

    SEED_FLAGS = ("gpu-memory-utilization", "max-model-len", "max-num-seqs", "max-num-batched-tokens",
                  "tensor-parallel-size", "pipeline-parallel-size", "dtype", "quantization", "kv-cache-dtype",
                  "enable-prefix-caching", "enable-chunked-prefill", "enforce-eager", "served-model-name")
    _TYPES = {"gpu-memory-utilization": "float", "max-model-len": "int", "max-num-seqs": "int",
              "max-num-batched-tokens": "int", "tensor-parallel-size": "int", "pipeline-parallel-size": "int",
              "enable-prefix-caching": "bool", "enable-chunked-prefill": "bool", "enforce-eager": "bool",
              "served-model-name": "list"}
    BUILTIN_FLAGS = MappingProxyType({n: FlagSpec(n, _TYPES.get(n, "str")) for n in SEED_FLAGS})
    parse_flag_value = None  # type: ignore[assignment]

    def validate_flag(name: str, value: object) -> str | None:  # type: ignore[misc]
        spec = BUILTIN_FLAGS.get(name)
        if spec is None:
            return f"unknown flag --{name}"
        if spec.type == "int" and not (isinstance(value, int) and not isinstance(value, bool)):
            return f"expected an integer, got {value!r}"
        if spec.type == "float" and not isinstance(value, (int, float)):
            return f"expected a number, got {value!r}"
        return None


def parse_value(name: str, text: str) -> object:
    """Text typed in the flag editor as the flag's typed value (flagspec's parser when present)."""
    if parse_flag_value is not None:
        return parse_flag_value(name, text)
    spec = BUILTIN_FLAGS.get(name)
    kind = spec.type if spec else "str"
    text = text.strip()
    if kind == "bool":
        low = text.lower()
        if low in ("true", "yes", "on", "1"):
            return True
        if low in ("false", "no", "off", "0"):
            return False
        return text
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            return text
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            return text
    if kind == "list":
        return text.split()
    return text


# -- layout I/O ------------------------------------------------------------------------------------
try:
    from vtui.core.layout import LayoutError, load_layout, save_layout  # type: ignore
except ImportError:  # pragma: no cover
    class LayoutError(Exception):  # type: ignore[no-redef]
        pass

    def load_layout(path: Path) -> Layout:  # type: ignore[misc]
        raise LayoutError("layout loading is not available yet (vtui.core.layout)")

    def save_layout(layout: Layout, path: Path) -> None:  # type: ignore[misc]
        import tomli_w

        from vtui.core.atomic import atomic_write_text

        doc = {"session": {"name": layout.session.name}, "instance": [
            {"name": s.name, "model": s.model, "engine": s.engine, "gpus": list(s.gpus), "port": s.port,
             "flags": dict(s.flags)} for s in layout.instances]}
        atomic_write_text(Path(path), tomli_w.dumps(doc))


STATES_RUNNING = frozenset({State.STARTING, State.READY, State.UNHEALTHY, State.STOPPING})
PHASES: Sequence[Phase] = tuple(Phase)
__all__ = ["InstanceStatus", "MetricsSample", "Percentiles", "GpuSample", "GpuInfo", "GpuProcess",
           "StartupFacts", "Problem", "diagnose", "parse_startup", "BUILTIN_FLAGS", "SEED_FLAGS", "FlagSpec",
           "validate_flag", "LayoutError", "load_layout", "save_layout", "Supervisor", "PreflightError",
           "enum"]


def check_value(name: str, text: str) -> tuple[object, str | None]:
    """(typed value, None) for valid editor text, else (text, the schema's message)."""
    try:
        value = parse_value(name, text)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        return text, message.split(": ", 1)[1] if message.startswith(f"{name}: ") else message
    return value, validate_flag(name, value)
