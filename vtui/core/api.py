"""The typed seams between vtui's layers, as Protocols (no implementation here).

- `SupervisorApi`: what the dashboard and the CLI need from whoever owns a session's instances.
  `service.remote.RemoteSupervisor` (the session supervisor's socket client, the dashboard's default),
  `supervisor.supervisor.Supervisor` (what the session supervisor runs; the dashboard never runs one) and
  the fake the UI tests drive all satisfy it.

(The supervisor's OS seam, `Launcher`, lives beside its implementation: `supervisor.launcher`.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from vtui.core.events import Event
    from vtui.core.model import FlagValue, InstanceSpec, Layout
    from vtui.core.pending import FlagConflict
    from vtui.core.state import State
    from vtui.core.status import HostState, InstanceStatus

__all__ = ["HostFeed", "LogScrollback", "SupervisorApi", "TelemetryFeed"]


@runtime_checkable
class SupervisorApi(Protocol):
    """One session's owner, as its clients (dashboard, CLI) see it: snapshots, an event feed, and
    requests. Every method that acts is a coroutine; snapshots are immutable."""

    @property
    def layout(self) -> Layout: ...

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]: ...

    def status(self) -> tuple[InstanceStatus, ...]: ...

    def pids_of(self, name: str) -> set[int]: ...

    def recent_lines(self, name: str) -> list[str]: ...

    async def adopt(self) -> list[str]: ...

    async def start(self, names: Iterable[str] | None = None) -> None: ...

    async def stop(self, names: Iterable[str] | None = None) -> None: ...

    # The flags the instance started with, where the supervisor says. `label`: what the operation is
    # called while it runs and waits ("fix", "rollback"); `fallback`: wait for READY and, when the new
    # flags do not get there, go back to the flags before (core.refusals.RestartReverted says so). New
    # flags that cannot start are refused before anything is stopped (core.refusals.PreflightError).
    async def restart(
        self, name: str, spec: InstanceSpec | None = None, *, label: str = "restart", fallback: bool = False
    ) -> Mapping[str, FlagValue] | None: ...

    async def sleep(self, name: str, level: int = 1) -> None: ...  # vLLM sleep mode: READY -> ASLEEP

    async def wake(self, name: str) -> None: ...  # ASLEEP -> WAKING -> READY

    async def wait_settled(
        self, names: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[str, State]: ...

    async def run(self) -> None: ...

    async def close(self, stop_instances: bool = False) -> None: ...

    # Pending flag edits (`core.pending`): per instance, the flags as edited in a dashboard and not yet
    # applied or discarded, held by the session's owner so every dashboard of the session shows them.
    # `base`: the flags the edit was made from (None: those it runs with); when the applied flags change
    # under a kept edit, the owner rebases it and keeps the flags both changed as conflicts.
    def pending_edits(self) -> Mapping[str, Mapping[str, FlagValue]]: ...

    def pending_conflicts(self) -> Mapping[str, Sequence[FlagConflict]]: ...

    async def set_pending(
        self, name: str, flags: Mapping[str, FlagValue] | None, base: Mapping[str, FlagValue] | None = None
    ) -> None: ...  # flags None: clear


@runtime_checkable
class TelemetryFeed(Protocol):
    """A `SupervisorApi` that also sends samples and snapshots (the session supervisor's client): the
    dashboard then runs no scrape loop of its own and repaints on each snapshot. Kinds: "sample" (one
    MetricsSample), "history" (a HistoryBackfill: one instance's recent points and newest sample, the
    backfill of a newly attached client),
    "gpu" (a GpuSample), "host_gpu" (another host's, `vtui --host`)."""

    # True once attached when the feed carries GPU samples ("gpu"), so the client runs no sampler;
    # None before the first message
    feeds_gpu: bool | None
    # instance -> the StartupFacts the supervisor read from the whole log of its current run
    facts: dict[str, Any]

    def subscribe_telemetry(self, callback: Callable[[str, Any], None]) -> Callable[[], None]: ...

    def subscribe_statuses(self, callback: Callable[[], None]) -> Callable[[], None]: ...


@runtime_checkable
class LogScrollback(Protocol):
    """A `SupervisorApi` that reads an instance's older log lines back from its log file, through the
    supervisor that keeps it (`POST /logs`: `service.remote.RemoteSupervisor`, and `service.multihost.Fleet`
    for another host's instance): the `count` lines before `anchor` (consecutive lines of the log),
    oldest first; None when the anchor is not found or there is no file. Raises OSError when that
    supervisor does not answer."""

    async def older_lines(self, name: str, anchor: list[str], count: int) -> list[str] | None: ...


@runtime_checkable
class HostFeed(Protocol):
    """A `SupervisorApi` that also reaches other hosts' sessions (`service.multihost.Fleet`, `vtui --host`):
    their links' states, and a callback when one changes."""

    def hosts(self) -> tuple[HostState, ...]: ...

    def subscribe_hosts(self, callback: Callable[[], None]) -> Callable[[], None]: ...

    def drop_links(self) -> None: ...  # end the links now, waiting for nothing (the app exits)
