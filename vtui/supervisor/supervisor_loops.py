"""The supervisor's long-lived loops: the tick (logs, exits, watchdog restarts, idle sleeps, hung
starts, due restarts, router reconciliation), the health probes, and the attached servers' probes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from vtui.core.events import ProcessExited
from vtui.core.instance import Instance
from vtui.core.model import InstanceSpec
from vtui.core.state import State
from vtui.supervisor.attached import Attached, Probe
from vtui.supervisor.logfile import ExitInfo
from vtui.supervisor.opqueue import Operation, Runner
from vtui.supervisor.replicas import RECONCILE_EVERY_S
from vtui.supervisor.supervisor_base import SupervisorBase


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


WATCHED = (State.STARTING, State.READY, State.UNHEALTHY, State.ASLEEP, State.WAKING)  # exits are crashes
# states that wait for nothing timed finer than a second (a crash is seen by the next tick)
SETTLED = (State.READY, State.UNHEALTHY, State.ASLEEP, State.STOPPED, State.FAILED, State.UNREACHABLE)


class LoopMixin(SupervisorBase):
    def _ensure_loops(self) -> None:
        if self._loops:
            return
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._tick_wake = asyncio.Event()
        self._loops = [
            asyncio.create_task(self._tick_loop()),
            asyncio.create_task(self._health_loop()),
            asyncio.create_task(self._attached_loop()),  # its own loop: a slow remote URL delays no probe
        ]

    async def _tick_loop(self) -> None:
        while True:
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 — keep supervising; say what went wrong
                self._notice(None, "error", f"supervisor tick failed: {exc!r}")
            if self._quiet():  # the next whole second, or at once when a state changes or a client comes
                await self._rest(self._to_grid(self.idle_poll_interval))
            else:
                await self.clock.sleep(self._to_grid(self.poll_interval))  # each whole second with the probes

    async def _rest(self, seconds: float) -> None:
        wake = self._tick_wake
        if wake is None:
            await self.clock.sleep(seconds)
            return
        wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(wake.wait(), seconds)

    def _quiet(self) -> bool:
        """Nothing under way and nobody following the logs live: the tick may go at its idle pace."""
        if self.idle_poll_interval <= self.poll_interval or self.watched is None or self.watched():
            return False
        if self._pending or self._policy_stops or self._sleeps or self._sweeper.tasks or self._rescales:
            return False
        if any(not queue.idle for queue in self._ops.values()):  # an operation runs or waits
            return False
        return all(inst.state in SETTLED for inst in self.instances.values())

    async def _tick(self) -> None:
        now = self.clock.time()
        if not 0 <= now - self._reconciled_at < RECONCILE_EVERY_S:  # a router restarted, an add that failed
            self._reconciled_at = now
            for group in self.routers.groups():
                self._reconcile_soon(group)
        # quiet: the per-instance work (log drain, liveness, policies) on the whole seconds only, with the
        # probes (benchmarks/bench_supervisor_cost.py); a state change or a client makes it 5 Hz again
        if self._quiet() and now - self._last_full_tick < self.idle_poll_interval - self.poll_interval / 2:
            return
        self._last_full_tick = now
        for name, inst in list(self.instances.items()):
            self._drain(name)
            handle = inst.handle
            if handle is not None and inst.state in WATCHED and not self.launcher.alive(handle):
                await self._on_death(name, inst, handle)
            elif (why := inst.policy_stop_due()) is not None and name not in self._policy_stops:
                if not self._queue(name).idle:
                    continue  # a user's operation runs or waits: it decides the instance's fate first
                self._drain(name)
                self._notice(name, "error", f"{name}: {why}; restarting it")
                handle = inst.begin_policy_stop(why)
                if handle is not None:
                    op = self._queue(name).submit(
                        "stop",
                        _run(self._policy_stop(name, inst, handle)),
                        label="watchdog restart",
                        origin="policy",
                    )
                    assert op.task is not None
                    self._policy_stops[name] = op.task
            elif inst.idle_sleep_due() and name not in self._sleeps and self._queue(name).idle:
                self._sleeps[name] = asyncio.create_task(self._idle_sleep(name, inst))
            elif inst.start_overdue():
                self._drain(name)  # the last lines before the verdict go into its reason
                hung = inst.on_start_timeout()
                self._notice(name, "error", f"{name}: {inst.last_error}; stopping it")
                self._sweeper.end_hung(name, hung, self.stop_grace)  # a relaunch or stop waits for it
            if inst.restart_due() and name not in self._pending and self._queue(name).idle:
                op = self._queue(name).submit(
                    "start",
                    _run(self._launch_when_clear(name, initial=False)),
                    label="policy restart",
                    origin="policy",
                )
                assert op.task is not None
                self._pending[name] = op.task

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
        self._drain(name)
        self._emit(ProcessExited(name, handle.pid, code, self.clock.time()))
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
        exit_info = getattr(self.launcher, "exit_info", None)
        if exit_info is not None:
            return exit_info(handle)
        code = self.launcher.exit_code(handle)
        if code is None:
            return None
        return ExitInfo(code, None if code < 0 else code, -code if code < 0 else None)

    async def _health_loop(self) -> None:
        while True:
            probing = [
                i
                for i in self.instances.values()
                if i.handle is not None and i.state in (State.STARTING, State.READY, State.UNHEALTHY)
            ]
            if probing:
                results = await asyncio.gather(
                    *(self.launcher.health(i.spec) for i in probing), return_exceptions=True
                )
                for inst, ok in zip(probing, results, strict=True):
                    if inst.handle is not None and inst.state in (
                        State.STARTING,
                        State.READY,
                        State.UNHEALTHY,
                    ):
                        if ok is True and inst.state is State.STARTING:
                            self._drain(inst.spec.name)  # the startup phases logged so far come first
                        inst.on_health(ok is True)
            await self.clock.sleep(self._to_grid(self.health_interval))

    def _to_grid(self, interval: float) -> float:
        """Seconds to the next multiple of `interval` on the clock, at least half of it away: the health
        probes fall on the whole seconds, as the session service's scrapes do (`service.probes._Beat`),
        so an instance's /health and /metrics requests, their answers and their access-log lines come
        in the same wake-ups of the supervisor instead of two apart."""
        delay = interval - self.clock.time() % interval
        return delay + interval if delay < interval / 2 else delay

    # -- attached servers ----------------------------------------------------------------------------
    async def _attached_loop(self) -> None:
        while True:
            try:
                await self._probe_attached([i for i in self.instances.values() if isinstance(i, Attached)])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 — keep watching; say what went wrong
                self._notice(None, "error", f"attached servers' probe failed: {exc!r}")
            await self.clock.sleep(self._to_grid(self.health_interval))  # in the health probes' wake-up

    async def _probe_attached(self, attached: list[Attached]) -> None:
        """One /health probe of each attached server, at once; its state follows (`Attached.on_probe`)."""
        if not attached:
            return
        results = await asyncio.gather(*(self._probe(i.spec) for i in attached), return_exceptions=True)
        for inst, result in zip(attached, results, strict=True):
            if self.instances.get(inst.spec.name) is not inst:
                continue  # dropped or replaced by a new layout meanwhile
            if isinstance(result, BaseException):
                result = Probe(None, f"probe failed: {result!r}")
            inst.on_probe(result)

    async def _probe(self, spec: InstanceSpec) -> Probe:
        """The launcher's cheap probe where it has one for this URL, else httpx (`AttachedProber`)."""
        fast = getattr(self.launcher, "probe", None)
        result = await fast(spec) if fast is not None else None
        return result if isinstance(result, Probe) else await self.prober.probe(spec)


def _run(coro: Coroutine[Any, Any, None]) -> Runner:
    """A runner for an operation that starts at once (a policy's, on an idle queue)."""

    async def run(_op: Operation) -> None:
        await coro

    return run
