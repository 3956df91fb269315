"""Adoption: the instances a previous vtui started (its run records) taken over again, a launch
recorded ahead of its spawn found by its marker, the leftovers of a dead one swept, a restart it left
half done finished, and the outcome of the last run restored for an instance not running."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vtui.core.clock import Clock
from vtui.core.model import SECRET_FLAGS, InstanceSpec
from vtui.core.refusals import sleep_problem
from vtui.core.runstate import MASK, RunRecord, merge_flags, spec_from_dict
from vtui.core.state import State
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.launcher import Launcher
from vtui.supervisor.logfile import read_tail
from vtui.supervisor.logtails import LogTails
from vtui.supervisor.operations import Operations
from vtui.supervisor.records import Records
from vtui.supervisor.roster import Roster
from vtui.supervisor.startgate import Sweeper
from vtui.supervisor.supervision import asleep_level, find_launched, kill_marked
from vtui.supervisor.supervisor_restart import Restarts

__all__ = ["Adoption"]


class Adoption:
    """`done`: adopted once already (a start or stop adopts first when nobody asked)."""

    def __init__(
        self,
        roster: Roster,
        operations: Operations,
        records: Records,
        tails: LogTails,
        sweeper: Sweeper,
        restarts: Restarts,
        launcher: Launcher,
        clock: Clock,
        notice: Callable[[str | None, str, str], None],
        *,
        unlisted: bool,
    ) -> None:
        self._roster = roster
        self._operations = operations
        self._records = records
        self._tails = tails
        self._sweeper = sweeper
        self._restarts = restarts
        self._launcher = launcher
        self._clock = clock
        self._notice = notice
        self.unlisted = unlisted  # adopt recorded instances the layout no longer names
        self.done = False

    async def adopt(self) -> list[str]:
        """Re-adopt recorded, still-live instances (same pid AND create time, matching command).
        Leftovers of a recorded instance whose leader died are swept and its record becomes an
        outcome; an instance not running takes over its last outcome (state, error, restarts, flags)."""
        self.done = True
        roster, store, session = self._roster, self._records.store, self._roster.session
        adopted = []
        if self.unlisted:
            for unlisted in store.all(session):
                if unlisted.name not in roster.instances:
                    spec = _unlisted_spec(unlisted)
                    roster.instances[spec.name] = roster.new_instance(spec)
                    roster.layout = dataclasses.replace(
                        roster.layout, instances=(*roster.layout.instances, spec)
                    )
        for spec in roster.layout.instances:
            inst = roster.instances[spec.name]
            if inst.state is not State.STOPPED or spec.name in roster.pending:
                continue
            record = store.load(session, spec.name)
            if record is None:
                await asyncio.to_thread(self._kill_orphans, spec.name)
                self._restore_outcome(spec)
                continue
            if record.pid == 0:  # launch begun, never confirmed: its processes carry the marker
                handle = await asyncio.to_thread(self._found_launched, record)
                if handle is None:
                    store.remove(session, spec.name)
                    continue
                record.pid, record.create_time, record.pump_pid = (
                    handle.pid,
                    handle.create_time,
                    handle.pump_pid,
                )
                record.pgid, record.sid = handle.pgid, handle.sid
                store.save(record)
            else:
                handle = self._launcher.find(
                    pid=record.pid,
                    create_time=record.create_time,
                    argv=record.argv,
                    key=record.key,
                    log_path=Path(record.log_path),
                    pump_pid=record.pump_pid,
                )
            if handle is None:
                await self._sweeper.dead_record(record)
                self._note_lost_flags(spec, record.pid, record.flags)
                await asyncio.to_thread(self._records.outcome_of_dead, record)
                store.remove(session, spec.name)  # its pid is gone: nothing to adopt, ever
                self._restore_outcome(spec)
                continue
            inst.spec = merge_flags(spec, record.flags)
            roster.set_spec(inst.spec)
            roster.rebase_edits(spec.name)
            inst.restarts = record.restarts
            if record.last_good_flags is not None:
                inst.last_good_spec = merge_flags(spec, record.last_good_flags)
            inst.log_path = Path(record.log_path)
            inst.lines.extend(read_tail(inst.log_path, 200))
            self._tails.follow(spec.name, inst.log_path)
            healthy = await self._launcher.health(inst.spec)
            inst.adopt(handle, healthy=healthy, started_at=record.started_at)
            if healthy and sleep_problem(inst.spec) is None:
                level = await asleep_level(inst.spec.base_url)  # it answers /health while asleep
                if level is not None:
                    inst.on_slept(level, "adopted asleep")
            adopted.append(spec.name)
            self._notice(spec.name, "info", f"adopted {spec.name} (pid {record.pid})")
        for spec in roster.layout.instances:
            self._resume_operation(spec.name)
        return adopted

    def _resume_operation(self, name: str) -> None:
        """A restart the last supervisor began and did not finish (it was killed mid-way): finished now,
        through the queue, with the flags it was to start with, unless the instance runs them already."""
        op = self._records.store.load_operation(self._roster.session, name)
        inst = self._roster.instances.get(name)
        if op is None or inst is None:
            return
        target = merge_flags(inst.spec, op.flags)
        if inst.state.running and inst.spec.flags == target.flags:
            self._records.store.clear_operation(self._roster.session, name)
            return
        self._notice(
            name,
            "warning",
            f"{name}: a {op.label} was under way when the last supervisor ended; finishing it",
        )

        queued = self._operations.queue(name).submit(  # a start asked with this adoption joins it
            "restart",
            lambda o: self._restarts.run(name, o),
            label=f"{op.label} (resumed)",
            change=lambda _spec: target,
        )
        queued.future.add_done_callback(_said_nothing)

    def _restore_outcome(self, spec: InstanceSpec) -> None:
        """`spec`'s instance (not running) as its last run ended: the flags it ran with (applied in
        vtui, saved or not: what `ps` and the dashboard report until its next start, which takes the
        layout's again), the restart count, the error, FAILED / CRASHED."""
        outcome = self._records.store.load_outcome(self._roster.session, spec.name)
        inst = self._roster.instances[spec.name]
        if outcome is None or inst.state is not State.STOPPED:
            return
        ran = merge_flags(spec, outcome.flags)
        if ran.flags != spec.flags:
            self._roster.restored[spec.name] = spec
            inst.spec = ran
            self._roster.set_spec(ran)
            self._roster.rebase_edits(spec.name)
        state = {"failed": State.FAILED, "crashed": State.CRASHED}.get(outcome.state, State.STOPPED)
        inst.restore(
            state,
            restarts=outcome.restarts,
            last_error=outcome.last_error,
            failed_at=outcome.failed_at,
            diagnosis=outcome.diagnosis,
        )

    def _kill_orphans(self, name: str) -> None:
        """Processes marked as this session's `name` while it has no run record are a lost launch's (the
        record is written before the spawn and removed only once its processes are gone or killed): a
        pump that finished forking after an earlier look killed the rest. Killed, and said."""
        killed = kill_marked(f"{self._roster.session}/{name}")
        if killed:
            self._notice(name, "warning", f"{name}: killed processes of a lost launch {killed}")

    def _found_launched(self, record: RunRecord) -> ProcessHandle | None:
        """The process tree of a launch recorded ahead of its spawn (the launcher died before the
        confirmation): adopted when its log pump and leader live; anything else with its marker is
        killed (a pump killed mid-handshake leaves a server no log would capture)."""
        handle = find_launched(self._launcher, record)
        if handle is None:
            killed = kill_marked(record.key)
            if killed:
                self._notice(
                    record.name,
                    "warning",
                    f"{record.name}: killed the processes of an unconfirmed launch {killed}",
                )
        return handle

    def _note_lost_flags(self, spec: InstanceSpec, pid: int, recorded: dict[str, Any]) -> None:
        """A recorded instance died with no supervisor watching; the next start uses the layout. Say
        which flags of its last run the layout does not have, so a retune done in vtui is not lost unseen."""
        ran = merge_flags(spec, recorded).flags
        changed = sorted(k for k in set(ran) | set(spec.flags) if ran.get(k) != spec.flags.get(k))
        if changed:
            was = ", ".join(f"{k}={ran.get(k, '(unset)')}" for k in changed)
            now = ", ".join(f"{k}={spec.flags.get(k, '(unset)')}" for k in changed)
            self._notice(
                spec.name,
                "warning",
                f"{spec.name}: its last run (pid {pid}) ended unsupervised with "
                f"{was}; starting it again uses the layout's {now}",
            )


def _unlisted_spec(record: RunRecord) -> InstanceSpec:
    """The spec of a recorded instance the layout no longer names, from its record (a masked secret
    is dropped rather than passed on as `***`)."""
    spec = spec_from_dict(record.spec)
    masked = tuple(k for k in SECRET_FLAGS if spec.flags.get(k) == MASK)
    return spec.with_flags(unset=masked) if masked else spec


def _said_nothing(future: asyncio.Future[Any]) -> None:
    """A resumed restart's outcome: its events and notices said it; nobody waits for the result."""
    if not future.cancelled():
        future.exception()
