"""The supervisor's tick at its idle pace: with every instance settled, nothing under way and nobody
following (`watched` False), the per-instance work (log drain, liveness, policies) runs once a second on
the whole seconds; a client, or an instance on its way somewhere, brings every tick back."""

from __future__ import annotations

from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.state import State
from vtui.supervisor.supervisor import Supervisor


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def full_ticks(sup: Supervisor, clock: Clock, times: list[float]) -> list[float]:
    drained: list[float] = []
    sup._drain = lambda name: drained.append(clock.now)  # type: ignore[method-assign]
    for t in times:
        clock.now = t
        await sup._tick()
    return sorted(set(drained))


async def test_quiet_and_unwatched_the_tick_works_once_a_second(tmp_path) -> None:
    clock = Clock()
    spec = InstanceSpec(name="a", model="m", port=1, engine="sim")
    sup = Supervisor(Layout(SessionSpec(name="quiet"), (spec,)), clock=clock, check_preflight=False)
    ticks = [1000.0 + 0.2 * i for i in range(11)]  # 1000.0 … 1002.0, five a second
    assert sup.instances["a"].state is State.STOPPED

    assert await full_ticks(sup, clock, ticks) == ticks  # the default: no idle pace
    sup.idle_poll_interval = 1.0
    following = [True]
    sup.watched = lambda: following[0]
    assert await full_ticks(sup, clock, ticks) == ticks  # a client follows: every tick
    following[0] = False
    sup._last_full_tick = float("-inf")
    assert await full_ticks(sup, clock, ticks) == [1000.0, 1001.0, 1002.0]
    sup._pending["a"] = None  # type: ignore[assignment]  # a launch under way: every tick again
    assert await full_ticks(sup, clock, ticks) == ticks
