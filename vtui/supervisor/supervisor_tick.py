"""The supervisor's tick, its policy engine: each poll interval it reads new log lines, sees exits (a
crash: its leftovers swept before any relaunch), and acts on what each instance says is due — a
watchdog restart, an idle sleep, a start that hung past `start_timeout`, a restart by the restart
policy — and on router membership every few seconds. A policy acts only on an instance whose queue is
idle: a user's operation decides its fate first.

Quiet (every instance settled, nothing under way, nobody following the logs live: `watched` False), the
per-instance work runs every `idle_interval` s only, on the whole seconds with the probes, and the loop
rests until then unless a state changes or a client comes (`wake`): benchmarks/bench_supervisor_cost.py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from vtui.core.clock import Clock
from vtui.core.events import Event, ProcessExited
from vtui.core.instance import Instance
from vtui.core.state import State
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.launcher import Launcher
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
# states that wait for nothing timed finer than a second (a crash is seen by the next tick)
SETTLED = (State.READY, State.UNHEALTHY, State.ASLEEP, State.STOPPED, State.FAILED, State.UNREACHABLE)


def _pump_alive(handle: ProcessHandle) -> bool:
    """The log pump of a launched instance still runs (it writes the exit code once it has reaped)."""
    pump = getattr(handle, "pump_pid", None)
    if not pump:
        return False
    try:
        import psutil

        return bool(psutil.Process(pump).status() != psutil.STATUS_ZOMBIE)
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
        launcher: Launcher,
        clock: Clock,
        emit: Callable[[Event], None],
        notice: Callable[[str | None, str, str], None],
        *,
        rescales: set[asyncio.Task[None]],
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
        self._rescales = rescales  # replica groups being scaled (`supervisor_layout.LayoutKeeper`)
        self.interval = interval
        # the idle pace (the session service sets both: 1 s, and "a feed client is attached"); 0: none
        self.idle_interval = 0.0
        self.watched: Callable[[], bool] | None = None
        self.last_full = float("-inf")  # when the per-instance work last ran
        self._wake: asyncio.Event | None = None  # ends a quiet tick's rest (a state change, `wake`)

    async def loop(self) -> None:
        self._wake = asyncio.Event()
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 — keep supervising; say what went wrong
                self._notice(None, "error", f"supervisor tick failed: {exc!r}")
            if self.quiet():  # the next whole second, or at once when a state changes or a client comes
                await self._rest(to_grid(self._clock, self.idle_interval))
            else:  # each whole second with the probes
                await self._clock.sleep(to_grid(self._clock, self.interval))

    def wake(self) -> None:
        """End a quiet tick's rest now (a client came to follow, a state changed)."""
        if self._wake is not None:
            self._wake.set()

    async def _rest(self, seconds: float) -> None:
        wake = self._wake
        if wake is None:
            await self._clock.sleep(seconds)
            return
        wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(wake.wait(), seconds)

    def quiet(self) -> bool:
        """Nothing under way and nobody following the logs live: the tick may go at its idle pace."""
        if self.idle_interval <= self.interval or self.watched is None or self.watched():
            return False
        if self._roster.pending or self._stops.watchdog_stops or self._sleeps.idle_sleeps:
            return False
        if self._sweeper.tasks or self._rescales or self._operations.busy():  # an operation runs or waits
            return False
        return all(inst.state in SETTLED for inst in self._roster.instances.values())

    async def tick(self) -> None:
        now = self._clock.time()
        self._membership.tick(now)  # a router restarted, an add that failed
        # quiet: the per-instance work (log drain, liveness, policies) on the whole seconds only, with the
        # probes (benchmarks/bench_supervisor_cost.py); a state change or a client makes it 5 Hz again
        if self.quiet() and now - self.last_full < self.idle_interval - self.interval / 2:
            return
        self.last_full = now
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
                if hung is not None:  # always: start_overdue() holds only with a handle
                    self._sweeper.end_hung(name, hung, self._stops.grace)  # a relaunch or stop waits
            if inst.restart_due() and name not in pending and idle(name):
                op = self._operations.queue(name).submit(
                    "start",
                    _run(self._launches.launch_when_clear(name, initial=False)),
                    label="policy restart",
                    origin="policy",
                )
                assert op.task is not None
                pending[name] = op.task

    async def _on_death(self, name: str, inst: Instance[ProcessHandle], handle: ProcessHandle) -> None:
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

    def _exit_info(self, handle: ProcessHandle) -> ExitInfo | None:
        """How the leader ended (ExitInfo), from a launcher that records it, else from its exit code."""
        exit_info = getattr(self._launcher, "exit_info", None)
        if exit_info is not None:
            info: ExitInfo | None = exit_info(handle)
            return info
        code = self._launcher.exit_code(handle)
        if code is None:
            return None
        return ExitInfo(code, None if code < 0 else code, -code if code < 0 else None)


def _run(coro: Coroutine[Any, Any, None]) -> Runner:
    """A runner for an operation that starts at once (a policy's, on an idle queue)."""

    async def run(_op: Operation) -> None:
        await coro

    return run
