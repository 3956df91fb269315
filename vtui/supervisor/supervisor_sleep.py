"""vLLM's sleep mode through the supervisor: sleep, wake, the idle sleep and the load samples that feed
it (and the stuck watchdog)."""

from __future__ import annotations

import asyncio

from vtui.core.instance import Instance
from vtui.core.refusals import OperationConflict, sleep_problem
from vtui.core.state import State
from vtui.supervisor.supervision import SLEEP_TIMEOUT, SleepRefused, engine_post
from vtui.supervisor.supervisor_base import SupervisorBase


class SleepMixin(SupervisorBase):
    async def _idle_sleep(self, name: str, inst: Instance) -> None:
        try:
            reason = f"idle for {inst.spec.idle_sleep_after:g} s (idle_sleep_after)"
            op = self._queue(name).submit(
                "sleep", lambda _op: self._do_sleep(name, 1, reason), label="idle sleep", origin="policy"
            )
            await asyncio.shield(op.future)
        except (SleepRefused, OperationConflict) as exc:
            self._notice(name, "warning", f"{name}: idle sleep failed: {exc}")
        finally:
            self._sleeps.pop(name, None)

    async def sleep(self, name: str, level: int = 1, reason: str | None = None) -> None:
        """vLLM's sleep mode: POST /sleep?level=N (1: weights to CPU, KV cache freed; 2: both freed),
        then READY -> ASLEEP. Raises SleepRefused (why) when it does not apply; ASLEEP already: nothing.
        Through the instance's operation queue."""
        self._names([name])
        op = self._queue(name).submit("sleep", lambda _op: self._do_sleep(name, level, reason))
        await asyncio.shield(op.future)

    async def _do_sleep(self, name: str, level: int, reason: str | None) -> None:
        inst = self.instances[name]
        if level not in (1, 2):
            raise SleepRefused(f"{name}: sleep level must be 1 or 2, got {level}")
        problem = sleep_problem(inst.spec)
        if problem:
            raise SleepRefused(problem)
        if inst.state is State.ASLEEP:
            return
        if inst.state is not State.READY:
            raise SleepRefused(f"{name} is {inst.state.name}: only a READY instance can sleep")
        status, text = await engine_post(f"{inst.spec.base_url}/sleep?level={level}", SLEEP_TIMEOUT)
        if status != 200:
            raise SleepRefused(f"{name}: /sleep?level={level} answered {status}: {text[:200]}")
        inst.on_slept(level, reason)

    async def wake(self, name: str) -> None:
        """POST /wake_up: ASLEEP -> WAKING -> READY (or back to ASLEEP with why). READY already: nothing.
        Through the instance's operation queue."""
        self._names([name])
        op = self._queue(name).submit("wake", lambda _op: self._do_wake(name))
        await asyncio.shield(op.future)

    async def _do_wake(self, name: str) -> None:
        inst = self.instances[name]
        problem = sleep_problem(inst.spec)
        if problem:
            raise SleepRefused(problem)
        if inst.state is State.READY:
            return
        if not inst.begin_wake():
            raise SleepRefused(f"{name} is {inst.state.name}: only an ASLEEP instance can wake")
        try:
            status, text = await engine_post(f"{inst.spec.base_url}/wake_up", SLEEP_TIMEOUT)
        except BaseException as exc:
            inst.on_woke(False, f"/wake_up failed: {exc!r}")
            raise
        if status != 200:
            inst.on_woke(False, f"/wake_up answered {status}: {text[:200]}")
            raise SleepRefused(f"{name}: /wake_up answered {status}: {text[:200]}")
        inst.on_woke(True)

    def observe_load(self, name: str, *, busy: bool, progress: tuple) -> None:
        """A metrics sample of `name` (the session supervisor scrapes them): feeds the stuck watchdog and
        the idle sleep."""
        inst = self.instances.get(name)
        if inst is not None:
            inst.on_load(busy=busy, progress=progress)
