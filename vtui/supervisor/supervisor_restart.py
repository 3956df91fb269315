"""Restart: one operation of the instance's queue that stops it and starts it again, with new flags when
given (checked first: nothing is stopped for flags that cannot start), recorded while under way (a
supervisor killed mid-way leaves it for the next one to finish), and with `fallback` back to the flags
before when the new ones do not reach READY."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from vtui.core.clock import Clock
from vtui.core.model import FlagValue, InstanceSpec
from vtui.core.refusals import OperationSuperseded, PreflightError, RestartReverted, attached_refusal
from vtui.core.runstate import PendingOperation
from vtui.core.state import State
from vtui.supervisor.attached import Attached, AttachedRefused
from vtui.supervisor.operations import Operations
from vtui.supervisor.opqueue import Change, Operation
from vtui.supervisor.preflight import preflight
from vtui.supervisor.records import Records
from vtui.supervisor.roster import Roster
from vtui.supervisor.supervisor_launch import Launches
from vtui.supervisor.supervisor_stop import Stops

__all__ = ["Restarts"]


class Restarts:
    def __init__(
        self,
        roster: Roster,
        operations: Operations,
        records: Records,
        launches: Launches,
        stops: Stops,
        clock: Clock,
        notice: Callable[[str | None, str, str], None],
        *,
        poll_interval: float,
        check_preflight: bool,
    ) -> None:
        self._roster = roster
        self._operations = operations
        self._records = records
        self._launches = launches
        self._stops = stops
        self._clock = clock
        self._notice = notice
        self.poll_interval = poll_interval
        self.check_preflight = check_preflight

    async def restart(
        self,
        name: str,
        spec: InstanceSpec | None = None,
        *,
        change: Change | None = None,
        label: str = "restart",
        fallback: bool = False,
    ) -> dict[str, FlagValue]:
        """Stop, then start again — with `spec` (new flags) when given, or with `change` applied to the
        spec it runs with when the restart begins. New flags are checked (preflight: ports, GPU overlap,
        what the layout needs) before anything is stopped: PreflightError, and it runs on. The spec that
        last reached READY stays in `last_good_spec` for a rollback. AttachedRefused for an attached
        server. `fallback`: wait for READY, and if the new flags do not get there, go back to the flags
        before (RestartReverted says so).

        Through the instance's operation queue: two restarts asked together are one restart with both
        changes, the newest last; each caller gets the flags it started with (returned)."""
        instances = self._roster.instances
        if isinstance(instances.get(name), Attached):
            raise AttachedRefused(attached_refusal(instances[name].spec, "restart"))
        self._roster.names([name])  # KeyError for an unknown name, before anything is queued
        if spec is not None:
            change = _replace_with(spec)
        op = self._operations.queue(name).submit(
            "restart", lambda op: self.run(name, op, fallback), label=label, change=change
        )
        result: dict[str, FlagValue] = await asyncio.shield(op.future)
        return result

    async def run(self, name: str, op: Operation, fallback: bool = False) -> dict[str, FlagValue]:
        """The restart `op`, for the instance whose queue it holds."""
        inst = self._roster.instances[name]
        before = inst.spec
        new = op.change(before) if op.change is not None else None
        if new is not None and new != before:
            self._precheck(name, new)  # nothing is stopped for flags that cannot start
        store, session = self._records.store, self._roster.session
        intent = PendingOperation(
            session, name, op.label, self._clock.time(), dict((new or before).flags), dict(before.flags)
        )
        await asyncio.to_thread(store.save_operation, intent)  # a supervisor killed mid-way: finished
        try:
            return await self._steps(name, op, before, new, fallback)
        finally:
            store.clear_operation(session, name)

    async def _steps(
        self, name: str, op: Operation, before: InstanceSpec, new: InstanceSpec | None, fallback: bool
    ) -> dict[str, FlagValue]:
        inst = self._roster.instances[name]
        was_running = inst.state.running
        await self._stops.stop_one(name)
        if new is not None:
            self._roster.apply_spec(name, new)
        inst.attempt = 0
        try:
            await self._start_again(name, op)
        except PreflightError as exc:  # the GPU memory check at launch: the old flags start again
            if new is None or new == before:
                raise
            self._roster.apply_spec(name, before)
            if was_running:
                await self._start_again(name, op)
            raise RestartReverted(
                f"{name}: the new flags were refused at launch ({'; '.join(exc.problems)}); "
                + ("it runs with the flags before" if was_running else "it keeps the flags before"),
                dict(before.flags),
            ) from exc
        if not fallback or new is None or new == before:
            return dict(inst.spec.flags)
        state = await self._settle_alone(name)
        if state is State.READY or self._operations.queue(name).stop_waiting:
            return dict(inst.spec.flags)
        why = inst.last_error or f"it is {state.value}"
        self._notice(
            name, "error", f"{name}: the new flags did not reach READY ({why}); back to the flags before"
        )
        await self._stops.stop_one(name)
        self._roster.apply_spec(name, before)
        inst.attempt = 0
        await self._start_again(name, op)
        back = await self._settle_alone(name)
        raise RestartReverted(
            f"{name}: the new flags did not reach READY ({why}); it went back to the flags before "
            f"and is {back.value} again",
            dict(before.flags),
        )

    def _precheck(self, name: str, new: InstanceSpec) -> None:
        if not self.check_preflight:
            return
        others = [n for n in self._roster.instances if n != name and self._roster.active(n)]
        old = self._roster.instances[name].spec
        layout = self._roster.layout.replace_instance(new)
        result = preflight(layout, [name], running=others, ports_freed=[old.port])
        if result.problems:
            raise PreflightError(result.problems)

    async def _start_again(self, name: str, op: Operation) -> None:
        cut = OperationSuperseded(f"{name}: stopped, not started again: a stop came during the {op.label}")
        queue = self._operations.queue(name)
        if queue.stop_waiting:
            raise cut
        await self._launches.do_start([name])
        if queue.stop_waiting and not self._roster.instances[name].state.running:
            raise cut

    async def _settle_alone(self, name: str) -> State:
        """Until the instance is READY or its start failed (a crash: BACKOFF, which waits for this
        operation), or a stop waits behind this operation."""
        inst = self._roster.instances[name]
        while not self._operations.queue(name).stop_waiting:
            if name not in self._roster.pending and inst.state is not State.STARTING:
                return inst.state
            await self._clock.sleep(self.poll_interval)
        return inst.state


def _replace_with(spec: InstanceSpec) -> Change:
    """A restart's change that gives the whole spec (a rollback, a preset, a fix computed by a client)."""
    return lambda _current: spec
