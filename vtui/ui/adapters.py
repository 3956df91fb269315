"""The UI's one import point for its sibling packages' types (supervisor, telemetry, flag schema,
layout I/O), plus the few helpers the screens share: StartupFacts lookups and the editor's value check.
"""

from __future__ import annotations

from typing import Any

from vtui.core.flagspec import BUILTIN_FLAGS, SEED_FLAGS, FlagSpec, parse_flag_value, validate_flag
from vtui.core.supervisor import InstanceStatus, PreflightError, Supervisor
from vtui.layouts import LayoutError, load_layout, save_layout
from vtui.telemetry.diagnosis import Problem, diagnose
from vtui.telemetry.gpu import GpuInfo, GpuProcess, GpuSample, GpuSampler
from vtui.telemetry.metrics import MetricsSample, Percentiles
from vtui.telemetry.scrape import ScrapeLoop
from vtui.telemetry.startup_log import StartupFacts, parse_startup


def gpu_sampler_class() -> type[GpuSampler]:
    return GpuSampler


def scrape_loop_class() -> type[ScrapeLoop]:
    return ScrapeLoop


def fact(facts: Any, *names: str) -> Any:
    """The first non-None attribute among `names` (None when there are no facts yet)."""
    for name in names:
        value = getattr(facts, name, None) if facts is not None else None
        if value is not None:
            return value
    return None


def kv_tokens_of(facts: Any) -> int | None:
    return fact(facts, "kv_cache_tokens")


def max_concurrency_of(facts: Any) -> float | None:
    return fact(facts, "max_concurrency")


def parse_value(name: str, text: str) -> object:
    """Text typed in the flag editor as the flag's typed value (the flag schema's parser)."""
    return parse_flag_value(name, text)


def check_value(name: str, text: str) -> tuple[object, str | None]:
    """(typed value, None) for valid editor text, else (text, the schema's message)."""
    try:
        value = parse_value(name, text)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        return text, message.split(": ", 1)[1] if message.startswith(f"{name}: ") else message
    return value, validate_flag(name, value)


__all__ = [
    "BUILTIN_FLAGS",
    "SEED_FLAGS",
    "FlagSpec",
    "GpuInfo",
    "GpuProcess",
    "GpuSample",
    "InstanceStatus",
    "LayoutError",
    "MetricsSample",
    "Percentiles",
    "PreflightError",
    "Problem",
    "StartupFacts",
    "Supervisor",
    "check_value",
    "diagnose",
    "fact",
    "kv_tokens_of",
    "load_layout",
    "max_concurrency_of",
    "parse_startup",
    "parse_value",
    "save_layout",
    "validate_flag",
]
