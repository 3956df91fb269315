"""Stop and restart: replicas before their routers, a pending launch or watchdog restart settled first,
the drain (`supervisor.drain`) through the launcher's stop; a watchdog's restart without the drain."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

from vtui.core.instance import Instance
from vtui.core.model import FlagValue, InstanceSpec
from vtui.core.refusals import OperationSuperseded, PreflightError, RestartReverted, attached_refusal
from vtui.core.runstate import PendingOperation
from vtui.core.state import State
from vtui.supervisor.attached import Attached, AttachedRefused
from vtui.supervisor.opqueue import Change, Operation, Runner
from vtui.supervisor.preflight import preflight
from vtui.supervisor.supervisor_base import SupervisorBase


class StopMixin(SupervisorBase):
    async def stop(self, names: Iterable[str] | None = None, grace: float | None = None) -> None:
        """Stop each instance: SIGTERM, grace, SIGKILL of the group, sweep; STOPPED once nothing is left.
        `grace`: seconds between SIGTERM and SIGKILL for this stop (default: `stop_grace`)."""
        if not self._adopted_once:
            await self.adopt()
        wanted = self._names(names)
        routers = [n for n in wanted if self.instances[n].spec.engine == "router"]
        # replicas drain first (their router stops sending them requests), their routers after them
        for batch in ([n for n in wanted if n not in routers], routers):
            ops = [self._queue(n).submit("stop", self._stopper(n, grace)) for n in batch]
            results = await asyncio.gather(*(asyncio.shield(op.future) for op in ops), return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise result

    def _stopper(self, name: str, grace: float | None) -> Runner:
        async def run(_op: Operation) -> None:
            await self._stop_one(name, grace)

        return run

    async def _stop_one(self, name: str, grace: float | None = None) -> None:
        inst = self.instances[name]
        if isinstance(inst, Attached):
            self._notice(name, "info", f"{name}: {left_running(inst.spec)}")
            return
        for tasks in (self._policy_stops, self._sleeps):
            task = tasks.pop(name, None)
            if task is not None:  # a watchdog restart or an idle sleep under way finishes first
                with contextlib.suppress(Exception):
                    await task
        pending = self._pending.pop(name, None)
        if pending is not None:
            pending.cancel()  # a spawn under way finishes first and attaches its process: stopped below
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        await self._sweeper.settle(name)
        handle = inst.begin_stop()
        if handle is None:
            inst.finish_stop()  # STOPPING with no process (nothing was spawned): STOPPED
            self.store.remove(self.session, name)
            return
        handle.serves(inst.spec)  # where the stop asks how many requests are in flight (supervisor.drain)
        report = await asyncio.to_thread(
            self.launcher.stop, handle, self.stop_grace if grace is None else grace
        )
        self._drain(name)
        if report.cut_text():
            self._notice(name, "warning", f"{name}: {report.cut_text()}")
        if not report.graceful:
            self._notice(name, "warning", f"{name} did not stop on SIGTERM: killed {list(report.killed)}")
        if report.leftovers:
            self._notice(
                name, "error", f"{name}: processes still alive after SIGKILL: {list(report.leftovers)}"
            )
        inst.finish_stop()
        self.store.remove(self.session, name)

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
        if isinstance(self.instances.get(name), Attached):
            raise AttachedRefused(attached_refusal(self.instances[name].spec, "restart"))
        self._names([name])  # KeyError for an unknown name, before anything is queued
        if spec is not None:
            change = _replace_with(spec)
        op = self._queue(name).submit(
            "restart", lambda op: self._do_restart(name, op, fallback), label=label, change=change
        )
        result: dict[str, FlagValue] = await asyncio.shield(op.future)
        return result

    async def _do_restart(self, name: str, op: Operation, fallback: bool = False) -> dict[str, FlagValue]:
        inst = self.instances[name]
        before = inst.spec
        new = op.change(before) if op.change is not None else None
        if new is not None and new != before:
            self._precheck(name, new)  # nothing is stopped for flags that cannot start
        intent = PendingOperation(
            self.session, name, op.label, self.clock.time(), dict((new or before).flags), dict(before.flags)
        )
        await asyncio.to_thread(self.store.save_operation, intent)  # a supervisor killed mid-way: finished
        try:
            return await self._restart_steps(name, op, before, new, fallback)
        finally:
            self.store.clear_operation(self.session, name)

    async def _restart_steps(
        self, name: str, op: Operation, before: InstanceSpec, new: InstanceSpec | None, fallback: bool
    ) -> dict[str, FlagValue]:
        inst = self.instances[name]
        was_running = inst.state.running
        await self._stop_one(name)
        if new is not None:
            self._apply_spec(name, new)
        inst.attempt = 0
        try:
            await self._start_again(name, op)
        except PreflightError as exc:  # the GPU memory check at launch: the old flags start again
            if new is None or new == before:
                raise
            self._apply_spec(name, before)
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
        if state is State.READY or self._queue(name).stop_waiting:
            return dict(inst.spec.flags)
        why = inst.last_error or f"it is {state.value}"
        self._notice(
            name, "error", f"{name}: the new flags did not reach READY ({why}); back to the flags before"
        )
        await self._stop_one(name)
        self._apply_spec(name, before)
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
        others = [
            n for n, i in self.instances.items() if n != name and (i.state.running or n in self._pending)
        ]
        old = self.instances[name].spec
        result = preflight(self._layout.replace_instance(new), [name], running=others, ports_freed=[old.port])
        if result.problems:
            raise PreflightError(result.problems)

    def _apply_spec(self, name: str, spec: InstanceSpec) -> None:
        inst = self.instances[name]
        self._restored_layout.pop(name, None)  # these flags, not the layout's, start next
        inst.spec = spec
        self._set_layout_spec(spec)
        self._rebase_edits(name)  # another client's kept edit keeps only its own changes on these

    async def _start_again(self, name: str, op: Operation) -> None:
        cut = OperationSuperseded(f"{name}: stopped, not started again: a stop came during the {op.label}")
        if self._queue(name).stop_waiting:
            raise cut
        await self._do_start([name])
        if self._queue(name).stop_waiting and not self.instances[name].state.running:
            raise cut

    async def _settle_alone(self, name: str) -> State:
        """Until the instance is READY or its start failed (a crash: BACKOFF, which waits for this
        operation), or a stop waits behind this operation."""
        inst = self.instances[name]
        while not self._queue(name).stop_waiting:
            if name not in self._pending and inst.state is not State.STARTING:
                return inst.state
            await self.clock.sleep(self.poll_interval)
        return inst.state

    async def _policy_stop(self, name: str, inst: Instance, handle: Any) -> None:
        """A watchdog's restart: the normal stop (SIGTERM, grace, SIGKILL of the group, sweep), then
        `finish_stop` makes the run a failure (CRASHED, then BACKOFF or FAILED by the restart policy)."""
        try:  # no drain: a hung or stuck server finishes nothing (handle.serves is not called)
            report = await asyncio.to_thread(self.launcher.stop, handle, self.stop_grace)
            self._drain(name)
            if not report.graceful:
                self._notice(name, "warning", f"{name} did not stop on SIGTERM: killed {list(report.killed)}")
        finally:
            inst.finish_stop()
            self._policy_stops.pop(name, None)


def left_running(spec: InstanceSpec) -> str:
    """What a stop says of an attached server."""
    return f'attached server (engine = "external", {spec.base_url}) left running: vtui never stops it'


def _replace_with(spec: InstanceSpec) -> Change:
    """A restart's change that gives the whole spec (a rollback, a preset, a fix computed by a client)."""
    return lambda _current: spec
