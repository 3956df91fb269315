"""A virtual clock for tests of loops that sleep: `vtui.core.clock.Clock`'s `time()` and `sleep()`, where
a sleep ends when the test moves the time past its deadline, at once in real time. Several tasks may
sleep on it; they wake in deadline order, each one's work done before the time moves on."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

# asyncio turns a woken task around in a few loop iterations (a future's callback, the task's step, a
# task it spawns starting): this many leave every woken task waiting again before the time moves.
_SETTLE_ROUNDS = 20


async def _settle() -> None:
    for _ in range(_SETTLE_ROUNDS):
        await asyncio.sleep(0)


class VirtualClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.slept: list[float] = []  # every sleep asked for, in order
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []  # (deadline, order, wake)
        self._order = itertools.count()
        self._new_sleeper = asyncio.Event()

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._order), wake))
        self._new_sleeper.set()
        await wake

    async def advance(self, seconds: float) -> None:
        """Move the time `seconds` on, waking each sleeper whose deadline comes by then, in order (for
        tasks that wait on nothing but the clock)."""
        end = self.now + seconds
        while (deadline := await self._next_deadline(wait=False)) is not None and deadline <= end:
            self._wake_first(deadline)
        self.now = end

    async def run_until(self, done: Callable[[], bool], *, max_wakes: int = 10_000) -> None:
        """Wake the sleepers one deadline at a time until `done()` holds; while none sleeps, wait for
        one (the tasks may wait on real I/O)."""
        for _ in range(max_wakes):
            deadline = await self._next_deadline(wait=True)
            if done():
                return
            assert deadline is not None
            self._wake_first(deadline)
        raise AssertionError(f"not done after {max_wakes} wake-ups (virtual time {self.now})")

    async def _next_deadline(self, *, wait: bool) -> float | None:
        """The earliest live sleeper's deadline once the woken tasks have settled. None sleeping:
        None, or with `wait` (a task waits on real I/O, a real server's answer or timeout) the first
        deadline of the next sleep."""
        while True:
            await _settle()
            while self._sleepers and self._sleepers[0][2].done():  # a cancelled sleep
                heapq.heappop(self._sleepers)
            if self._sleepers:
                return self._sleepers[0][0]
            if not wait:
                return None
            self._new_sleeper.clear()
            await self._new_sleeper.wait()

    def _wake_first(self, deadline: float) -> None:
        self.now = max(self.now, deadline)
        while self._sleepers and self._sleepers[0][0] <= deadline:
            wake = heapq.heappop(self._sleepers)[2]
            if not wake.done():
                wake.set_result(None)
