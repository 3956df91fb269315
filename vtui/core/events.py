"""Immutable events that cross from workers (supervisor, scrapers, samplers) to consumers (CLI, UI).

Everything here is a frozen dataclass: safe to hand between threads, cheap to compare, never mutated.
Telemetry samples (MetricsSample, GpuSample, StartupFacts) live in vtui.telemetry and follow the same rule.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import TypeVar

from vtui.core.state import Phase, State


@dataclass(frozen=True, slots=True)
class StateChanged:
    instance: str
    old: State
    new: State
    at: float  # the supervisor clock's time (seconds)
    phase: Phase | None = None
    reason: str | None = None  # e.g. the root-cause line on CRASHED / FAILED


@dataclass(frozen=True, slots=True)
class PhaseChanged:
    instance: str
    phase: Phase
    at: float


@dataclass(frozen=True, slots=True)
class LogLines:
    instance: str
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ProcessExited:
    instance: str
    pid: int
    returncode: int | None
    at: float


@dataclass(frozen=True, slots=True)
class Notice:
    """A one-line message for the user (preflight warnings, adoption, sweeps)."""

    instance: str | None
    level: str  # "info" | "warning" | "error"
    text: str


@dataclass(frozen=True, slots=True)
class OperationChanged:
    """What runs and what waits in an instance's operation queue changed (`supervisor.opqueue`)."""

    instance: str
    running: str | None  # the label of the running operation ("restart", "fix", "stop"…)
    waiting: str | None  # the label of the one waiting behind it
    at: float


Event = StateChanged | PhaseChanged | LogLines | ProcessExited | Notice | OperationChanged


def gone(event: Event, names: Container[str]) -> bool:
    """A notice about an instance no longer supervised (a replica scaled away says so once forgotten):
    the snapshot without it should go out with it."""
    return isinstance(event, Notice) and event.instance is not None and event.instance not in names


_F = TypeVar("_F", bound=Callable[..., object])


def subscribe_to(subscribers: list[_F], callback: _F) -> Callable[[], None]:
    """Add `callback` to a subscriber list; the function returned removes it (twice is harmless)."""
    subscribers.append(callback)

    def unsubscribe() -> None:
        with contextlib.suppress(ValueError):
            subscribers.remove(callback)

    return unsubscribe
