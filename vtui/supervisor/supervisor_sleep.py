"""vLLM's sleep mode through the supervisor: sleep and wake (each an operation of the instance's queue),
and the idle sleep its tick asks for."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from vtui.core.instance import Instance
from vtui.core.refusals import OperationConflict, sleep_problem
from vtui.core.state import State
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.operations import Operations
from vtui.supervisor.roster import Roster
from vtui.supervisor.supervision import SLEEP_TIMEOUT, SleepRefused, engine_post

__all__ = ["Sleeps"]


class Sleeps:
    def __init__(
        self, roster: Roster, operations: Operations, notice: Callable[[str | None, str, str], None]
    ) -> None:
        self._roster = roster
        self._operations = operations
        self._notice = notice
        self.idle_sleeps: dict[str, asyncio.Task[None]] = {}  # idle sleeps under way, by instance

    def idle_sleep(self, name: str, inst: Instance[ProcessHandle]) -> None:
        """Put `name` to sleep: idle for `idle_sleep_after` (once at a time)."""
        if name not in self.idle_sleeps:
            self.idle_sleeps[name] = asyncio.create_task(self._idle_sleep(name, inst))

    async def settle(self, name: str) -> None:
        """An idle sleep under way for `name` finishes first."""
        task = self.idle_sleeps.pop(name, None)
        if task is not None:
            with contextlib.suppress(Exception):
                await task

    async def _idle_sleep(self, name: str, inst: Instance[ProcessHandle]) -> None:
        try:
            reason = f"idle for {inst.spec.idle_sleep_after:g} s (idle_sleep_after)"
            op = self._operations.queue(name).submit(
                "sleep", lambda _op: self._do_sleep(name, 1, reason), label="idle sleep", origin="policy"
            )
            await asyncio.shield(op.future)
        except (SleepRefused, OperationConflict) as exc:
            self._notice(name, "warning", f"{name}: idle sleep failed: {exc}")
        finally:
            self.idle_sleeps.pop(name, None)

    async def sleep(self, name: str, level: int = 1, reason: str | None = None) -> None:
        """vLLM's sleep mode: POST /sleep?level=N (1: weights to CPU, KV cache freed; 2: both freed),
        then READY -> ASLEEP. Raises SleepRefused (why) when it does not apply; ASLEEP already: nothing.
        Through the instance's operation queue."""
        self._roster.names([name])
        op = self._operations.queue(name).submit("sleep", lambda _op: self._do_sleep(name, level, reason))
        await asyncio.shield(op.future)

    async def _do_sleep(self, name: str, level: int, reason: str | None) -> None:
        inst = self._roster.instances[name]
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
        self._roster.names([name])
        op = self._operations.queue(name).submit("wake", lambda _op: self._do_wake(name))
        await asyncio.shield(op.future)

    async def _do_wake(self, name: str) -> None:
        inst = self._roster.instances[name]
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
