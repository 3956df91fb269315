"""Snapshots a supervisor hands out: `InstanceStatus` (one instance, as the UI and the wire see it),
`HostState` (one `vtui --host` link) and `status_of` (an instance's snapshot). Data only: the model's
side of `core.api.SupervisorApi`, so the seam names no supervisor module."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vtui.core.instance import H, Instance
from vtui.core.model import InstanceSpec
from vtui.core.state import Phase, State

__all__ = ["HostState", "InstanceStatus", "status_of"]


@dataclass(frozen=True)
class InstanceStatus:
    """An immutable snapshot of one instance, safe to hand to the UI."""

    name: str
    spec: InstanceSpec
    state: State
    phase: Phase | None
    pid: int | None
    started_at: float | None
    restarts: int
    last_error: str | None
    log_path: Path | None
    adopted: bool
    last_good_spec: InstanceSpec | None
    next_restart_at: float | None
    failed_at: float | None = None  # when the last run ended in CRASHED / FAILED (wall clock)
    diagnosis: str | None = None  # the kind of the last failure's first recognised problem
    host: str | None = None  # the host label of an instance of another machine's session (vtui --host)
    operation: str | None = None  # the operation running now ("restart", "fix"…: supervisor.opqueue)
    waiting: str | None = None  # the operation waiting behind it


@dataclass(frozen=True)
class HostState:
    """One `vtui --host` link as the dashboard shows it: `state` is "connecting", "connected",
    "disconnected" or "no session" (the host answers, no session supervisor runs there)."""

    label: str  # what the fleet table shows ("gpu2")
    target: str  # what ssh was given ("user@gpu2")
    state: str
    detail: str | None = None  # why not connected (ssh's last line, the feed's error)
    sessions: tuple[str, ...] = ()
    since: float = 0.0  # wall clock of the last change

    @property
    def connected(self) -> bool:
        return self.state == "connected"


def status_of(inst: Instance[H]) -> InstanceStatus:
    """The snapshot of one instance: phase only while STARTING, start time only while running, next
    restart only in BACKOFF."""
    return InstanceStatus(
        name=inst.spec.name,
        spec=inst.spec,
        state=inst.state,
        phase=inst.phase if inst.state is State.STARTING else None,
        pid=inst.handle.pid if inst.handle is not None else None,
        started_at=inst.started_at if inst.state.running else None,
        restarts=inst.restarts,
        last_error=inst.last_error,
        log_path=inst.log_path,
        adopted=inst.adopted,
        last_good_spec=inst.last_good_spec,
        next_restart_at=inst.next_restart_at if inst.state is State.BACKOFF else None,
        failed_at=inst.failed_at,
        diagnosis=inst.diagnosis,
    )
