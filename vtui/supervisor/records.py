"""The supervisor's records past its own life (`core.runstate.RunStore`, for one session): run records
kept in step with each instance's state, how each run ended (`Outcome`), the outcome of a recorded run
that ended unwatched, and a restart under way (`PendingOperation`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from vtui.core.clock import Clock
from vtui.core.events import Event, StateChanged
from vtui.core.instance import Instance
from vtui.core.runstate import Outcome, RunRecord, RunStore
from vtui.core.state import State
from vtui.supervisor.attached import Attached
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.logfile import read_tail
from vtui.supervisor.roster import Roster
from vtui.supervisor.supervision import run_record

__all__ = ["Records", "diagnosis_kind"]


class Records:
    def __init__(self, store: RunStore, roster: Roster, clock: Clock) -> None:
        self.store = store
        self.session = roster.session
        self._roster = roster
        self._clock = clock

    def on_event(self, event: Event) -> None:
        if isinstance(event, StateChanged):
            self._record_state(event)

    def save_run(self, inst: Instance[ProcessHandle]) -> None:
        """The run record of `inst`'s process (re-adoption by a later supervisor)."""
        handle = inst.handle
        if handle is None:
            return
        self.store.save(run_record(inst, handle, self.session, self._roster.layout, self._clock))

    def remove(self, name: str) -> None:
        self.store.remove(self.session, name)

    def _record_state(self, event: StateChanged) -> None:
        inst = self._roster.instances.get(event.instance)
        if inst is None:
            return
        if not isinstance(inst, Attached):
            self._record_outcome(inst, event)
        if self.store.load(self.session, event.instance) is None:
            return
        if event.new is State.STOPPED:
            self.store.remove(self.session, event.instance)
            return
        good = inst.last_good_spec.flags if inst.last_good_spec is not None else None
        self.store.update(
            self.session,
            event.instance,
            last_state=event.new.value,
            restarts=inst.restarts,
            last_error=inst.last_error,
            last_good_flags=dict(good) if good else None,
        )

    def _record_outcome(self, inst: Instance[ProcessHandle], event: StateChanged) -> None:
        """How a run ended, kept past this supervisor (`core.runstate.Outcome`): written at CRASHED, FAILED
        and STOPPED (the error, the diagnosis, the flags it ran with, the restart count), removed at READY."""
        name = event.instance
        if event.new is State.READY:
            self.store.clear_outcome(self.session, name)
            return
        if event.new not in (State.CRASHED, State.FAILED, State.STOPPED):
            return
        if event.new is not State.STOPPED and event.old is not State.STOPPED:  # not a restored one
            inst.diagnosis = diagnosis_kind(list(inst.run_lines))
        failure = event.new is not State.STOPPED or event.old is not State.STOPPING  # not a plain stop
        self.store.save_outcome(
            Outcome(
                session=self.session,
                name=name,
                state=event.new.value,
                at=self._clock.time(),
                flags=dict(inst.spec.flags),
                restarts=inst.restarts,
                last_error=inst.last_error if failure else None,
                diagnosis=inst.diagnosis if failure else None,
                failed_at=inst.failed_at if failure else None,
            )
        )

    def outcome_of_dead(self, record: RunRecord) -> None:
        """The outcome of a recorded run whose leader is gone: the one its supervisor wrote when it saw
        the end (at or after the record's start), else one made from the record (it ended unwatched)."""
        old = self.store.load_outcome(self.session, record.name)
        if old is not None and old.at >= record.started_at:
            return
        ended = record.last_state in ("failed", "crashed")
        log = Path(record.log_path)
        when = self._clock.time()
        with contextlib.suppress(OSError):
            when = max(record.started_at, os.path.getmtime(log))  # its last log line: about when it died
        error = record.last_error if ended and record.last_error else None
        self.store.save_outcome(
            Outcome(
                session=self.session,
                name=record.name,
                state=record.last_state if ended else "failed",
                at=self._clock.time(),
                flags=dict(record.flags),
                restarts=record.restarts,
                last_error=error
                or f"pid {record.pid} exited while no vtui supervisor watched it "
                f"(last seen {record.last_state})",
                diagnosis=diagnosis_kind(read_tail(log, 400)),
                failed_at=when,
                pid=record.pid,
            )
        )


def diagnosis_kind(lines: list[str]) -> str | None:
    """The kind of the first problem `telemetry.diagnosis` recognises in a failed run's log lines."""
    if not lines:
        return None
    from vtui.telemetry.diagnosis import diagnose

    try:
        problems = diagnose(lines, holders_of_port=lambda _port: [])
    except Exception:  # noqa: BLE001 — a diagnosis is a nicety; the failure is recorded without it
        return None
    return problems[0].kind if problems else None
