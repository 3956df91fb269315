"""The supervisor's tick, its policy engine: each poll interval it reads new log lines, sees exits (a
crash: its leftovers swept before any relaunch), and acts on what each instance says is due — a
watchdog restart, an idle sleep, a start that hung past `start_timeout`, a restart by the restart
policy — and on router membership every few seconds. A policy acts only on an instance whose queue is
idle: a user's operation decides its fate first."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from vtui.core.clock import Clock
from vtui.core.events import Event, ProcessExited
from vtui.core.instance import Instance
from vtui.core.state import State
from vtui.supervisor.logfile import ExitInfo
from vtui.supervisor.logtails import LogTails
from vtui.supervisor.membership import Membership
from vtui.supervisor.operations import Operations
from vtui.supervisor.opqueue import Operation, Runner
from vtui.supervisor.roster import Roster
from vtui.supervisor.startgate import Sweeper
from vtui.supervisor.supervisor_launch import Launches
from vtui.supervisor.supervisor_probe import to_grid
from vtui.supervisor.supervisor_sleep import Sleeps
from vtui.supervisor.supervisor_stop import Stops

__all__ = ["Ticker"]

WATCHED = (State.STARTING, State.READY, State.UNHEALTHY, State.ASLEEP, State.WAKING)  # exits are crashes


def _pump_alive(handle: Any) -> bool:
    """The log pump of a launched instance still runs (it writes the exit code once it has reaped)."""
    pump = getattr(handle, "pump_pid", None)
    if not pump:
        return False
    try:
        import psutil

        return psutil.Process(pump).status() != psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001 — gone, or not ours to read
        return False


class Ticker:
    def __init__(
        self,
        roster: Roster,
        operations: Operations,
        tails: LogTails,
        sweeper: Sweeper,
        membership: Membership,
        launches: Launches,
        stops: Stops,
        sleeps: Sleeps,
        launcher: Any,
        clock: Clock,
        emit: Callable[[Event], None],
        notice: Callable[[str | None, str, str], None],
        *,
        interval: float,
    ) -> None:
        self._roster = roster
        self._operations = operations
        self._tails = tails
        self._sweeper = sweeper
        self._membership = membership
        self._launches = launches
        self._stops = stops
        self._sleeps = sleeps
        self._launcher = launcher
        self._clock = clock
        self._emit = emit
        self._notice = notice
        self.interval = interval

    async def loop(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep supervising; say what went wrong
                self._notice(None, "error", f"supervisor tick failed: {exc!r}")
            await self._clock.sleep(to_grid(self._clock, self.interval))  # each whole second with the probes

    async def tick(self) -> None:
        self._membership.tick(self._clock.time())  # a router restarted, an add that failed
        idle, pending = self._operations.idle, self._roster.pending
        for name, inst in list(self._roster.instances.items()):
            self._tails.drain(name)
            handle = inst.handle
            if handle is not None and inst.state in WATCHED and not self._launcher.alive(handle):
                await self._on_death(name, inst, handle)
            elif (why := inst.policy_stop_due()) is not None and name not in self._stops.watchdog_stops:
                if not idle(name):
                    continue  # a user's operation runs or waits: it decides the instance's fate first
                self._tails.drain(name)
                self._stops.watchdog_restart(name, inst, why)
            elif inst.idle_sleep_due() and name not in self._sleeps.idle_sleeps and idle(name):
                self._sleeps.idle_sleep(name, inst)
            elif inst.start_overdue():
                self._tails.drain(name)  # the last lines before the verdict go into its reason
                hung = inst.on_start_timeout()
                self._notice(name, "error", f"{name}: {inst.last_error}; stopping it")
                self._sweeper.end_hung(name, hung, self._stops.grace)  # a relaunch or stop waits for it
            if inst.restart_due() and name not in pending and idle(name):
                op = self._operations.queue(name).submit(
                    "start",
                    _run(self._launches.launch_when_clear(name, initial=False)),
                    label="policy restart",
                    origin="policy",
                )
                assert op.task is not None
                pending[name] = op.task

    async def _on_death(self, name: str, inst: Instance, handle: Any) -> None:
        info = self._exit_info(handle)
        # The pump writes the code right after reaping: give it a moment (seconds on a loaded machine,
        # while the pump lives; without the code an outside SIGTERM could not be named).
        for tick in range(60):
            if info is not None or (tick >= 10 and not _pump_alive(handle)):
                break
            await asyncio.sleep(0.05)
            info = self._exit_info(handle)
        code = info.returncode if info is not None else None
        self._tails.drain(name)
        self._emit(ProcessExited(name, handle.pid, code, self._clock.time()))
        not_retried = None
        if inst.state is State.STARTING and code != 0:
            from vtui.telemetry.diagnosis import not_worth_retrying

            problem = not_worth_retrying(list(inst.run_lines))
            if problem is not None:
                not_retried = f"the same flags would fail again ({problem.kind})"
        inst.on_exit(code, info.describe() if info is not None else None, not_retried=not_retried)
        # Children of a killed API server live on (VLLM::EngineCore): sweep before any relaunch.
        self._sweeper.after_crash(name, handle)

    def _exit_info(self, handle: Any) -> ExitInfo | None:
        """How the leader ended (ExitInfo), from a launcher that records it, else from its exit code."""
        exit_info = getattr(self._launcher, "exit_info", None)
        if exit_info is not None:
            return exit_info(handle)
        code = self._launcher.exit_code(handle)
        if code is None:
            return None
        return ExitInfo(code, None if code < 0 else code, -code if code < 0 else None)


def _run(coro: Coroutine[Any, Any, None]) -> Runner:
    """A runner for an operation that starts at once (a policy's, on an idle queue)."""

    async def run(_op: Operation) -> None:
        await coro

    return run
