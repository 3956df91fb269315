"""Stop: replicas before their routers, a pending launch, watchdog restart or idle sleep settled first,
the drain (`supervisor.drain`) through the launcher's stop; a watchdog's restart without the drain."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from vtui.core.instance import Instance
from vtui.core.model import InstanceSpec
from vtui.supervisor.attached import Attached
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.launcher import Launcher
from vtui.supervisor.logtails import LogTails
from vtui.supervisor.operations import Operations
from vtui.supervisor.opqueue import Operation, Runner
from vtui.supervisor.records import Records
from vtui.supervisor.roster import Roster
from vtui.supervisor.startgate import Sweeper
from vtui.supervisor.supervisor_sleep import Sleeps

__all__ = ["Stops", "left_running"]


class Stops:
    def __init__(
        self,
        roster: Roster,
        operations: Operations,
        records: Records,
        tails: LogTails,
        sweeper: Sweeper,
        sleeps: Sleeps,
        launcher: Launcher,
        notice: Callable[[str | None, str, str], None],
        *,
        grace: float | None,
    ) -> None:
        self._roster = roster
        self._operations = operations
        self._records = records
        self._tails = tails
        self._sweeper = sweeper
        self._sleeps = sleeps
        self._launcher = launcher
        self._notice = notice
        self.grace = grace  # seconds between SIGTERM and SIGKILL (None: the launcher's default)
        self.watchdog_stops: dict[str, asyncio.Task[None]] = {}  # liveness / stuck restarts under way

    async def stop(self, names: Iterable[str] | None = None, grace: float | None = None) -> None:
        """Stop each instance: SIGTERM, grace, SIGKILL of the group, sweep; STOPPED once nothing is left.
        `grace`: seconds between SIGTERM and SIGKILL for this stop (default: `grace`)."""
        wanted = self._roster.names(names)
        routers = [n for n in wanted if self._roster.instances[n].spec.engine == "router"]
        # replicas drain first (their router stops sending them requests), their routers after them
        for batch in ([n for n in wanted if n not in routers], routers):
            ops = [self._operations.queue(n).submit("stop", self._stopper(n, grace)) for n in batch]
            results = await asyncio.gather(*(asyncio.shield(op.future) for op in ops), return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise result

    def _stopper(self, name: str, grace: float | None) -> Runner:
        async def run(_op: Operation) -> None:
            await self.stop_one(name, grace)

        return run

    async def stop_one(self, name: str, grace: float | None = None) -> None:
        """Stop `name` now (its queue's operation holds it)."""
        inst = self._roster.instances[name]
        if isinstance(inst, Attached):
            self._notice(name, "info", f"{name}: {left_running(inst.spec)}")
            return
        task = self.watchdog_stops.pop(name, None)
        if task is not None:  # a watchdog restart under way finishes first
            with contextlib.suppress(Exception):
                await task
        await self._sleeps.settle(name)  # and an idle sleep
        pending = self._roster.pending.pop(name, None)
        if pending is not None:
            pending.cancel()  # a spawn under way finishes first and attaches its process: stopped below
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        await self._sweeper.settle(name)
        handle = inst.begin_stop()
        if handle is None:
            inst.finish_stop()  # STOPPING with no process (nothing was spawned): STOPPED
            self._records.remove(name)
            return
        handle.serves(inst.spec)  # where the stop asks how many requests are in flight (supervisor.drain)
        report = await asyncio.to_thread(self._launcher.stop, handle, self.grace if grace is None else grace)
        self._tails.drain(name)
        if report.cut_text():
            self._notice(name, "warning", f"{name}: {report.cut_text()}")
        elif report.drain_text():  # what the drain saw: the session log keeps it
            self._notice(name, "info", f"{name}: {report.drain_text()}")
        if not report.graceful:
            self._notice(name, "warning", f"{name} did not stop on SIGTERM: killed {list(report.killed)}")
        if report.leftovers:
            self._notice(
                name, "error", f"{name}: processes still alive after SIGKILL: {list(report.leftovers)}"
            )
        inst.finish_stop()
        self._records.remove(name)

    def watchdog_restart(self, name: str, inst: Instance[ProcessHandle], why: str) -> None:
        """A watchdog's verdict (`Instance.policy_stop_due`): the run ends as a failure, through the
        instance's queue (its restart policy then decides)."""
        self._notice(name, "error", f"{name}: {why}; restarting it")
        handle = inst.begin_policy_stop(why)
        if handle is None:
            return

        async def run(_op: Operation) -> None:
            await self._policy_stop(name, inst, handle)

        op = self._operations.queue(name).submit("stop", run, label="watchdog restart", origin="policy")
        assert op.task is not None
        self.watchdog_stops[name] = op.task

    async def _policy_stop(self, name: str, inst: Instance[ProcessHandle], handle: ProcessHandle) -> None:
        """The normal stop (SIGTERM, grace, SIGKILL of the group, sweep), then `finish_stop` makes the
        run a failure (CRASHED, then BACKOFF or FAILED by the restart policy)."""
        try:  # no drain: a hung or stuck server finishes nothing (handle.serves is not called)
            report = await asyncio.to_thread(self._launcher.stop, handle, self.grace)
            self._tails.drain(name)
            if not report.graceful:
                self._notice(name, "warning", f"{name} did not stop on SIGTERM: killed {list(report.killed)}")
        finally:
            inst.finish_stop()
            self.watchdog_stops.pop(name, None)


def left_running(spec: InstanceSpec) -> str:
    """What a stop says of an attached server."""
    return f'attached server (engine = "external", {spec.base_url}) left running: vtui never stops it'
