"""The supervisor's scrape loops share one grid: after its first scrape (at once), every loop of an
interval scrapes on the same ticks, one interval apart, and a cancelled loop does not disturb the others.
Time is a virtual clock's: the ticks are checked exactly, with no real waiting."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _support.clock import VirtualClock

from vtui.bench.lean_http import Response
from vtui.service.probes import LeanFetch
from vtui.telemetry.scrape import ScrapeLoop

PAYLOAD = (Path(__file__).parents[1] / "telemetry" / "fixtures" / "metrics_idle.txt").read_bytes()


class FakePool:
    def __init__(self, clock: VirtualClock, times: dict[str, list[float]]) -> None:
        self.clock, self.times = clock, times

    async def request(self, method: str, url: str, **_: object) -> Response:
        self.times.setdefault(url, []).append(self.clock.time())
        return Response(200, {}, PAYLOAD)


def _on_grid(t: float, interval: float) -> bool:
    return abs(t / interval - round(t / interval)) < 1e-9


def _scrape_times(interval: float, starts: list[float], cancel_first_after: float, then: float) -> dict:
    """Scrape times per URL of one loop per entry of `starts` (virtual seconds after the previous
    one started); the first loop is cancelled `cancel_first_after` s after the last started, the rest
    `then` s later."""

    async def main() -> tuple[dict[str, list[float]], list[float], float]:
        clock = VirtualClock(1000.0)
        times: dict[str, list[float]] = {}
        pool = FakePool(clock, times)
        samples: list = []
        tasks = []
        for i, start in enumerate(starts):
            await clock.advance(start)
            loop = ScrapeLoop(
                f"i{i}",
                f"http://127.0.0.1:{9000 + i}",
                samples.append,
                fetch=LeanFetch(lambda: pool),  # type: ignore[arg-type,return-value]
                interval=interval,
                clock=clock,
            )
            tasks.append(asyncio.ensure_future(loop.run()))
        await clock.advance(cancel_first_after)
        tasks[0].cancel()
        cancelled_at = clock.time()
        await clock.advance(then)
        for task in tasks[1:]:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert len(samples) == sum(len(t) for t in times.values())
        return times, [s.at for s in samples], cancelled_at

    times, stamps, cancelled_at = asyncio.run(main())
    assert sorted(stamps) == sorted(t for ts in times.values() for t in ts)  # stamped by the clock
    assert max(times["http://127.0.0.1:9000/metrics"]) <= cancelled_at
    return times


def test_scrape_loops_share_one_grid() -> None:
    times = _scrape_times(0.2, [0.0, 0.07, 0.07], cancel_first_after=0.5, then=0.6)
    assert [t[0] for t in times.values()] == pytest.approx([1000.0, 1000.07, 1000.14])  # at once
    later = {url: t[1:] for url, t in times.items()}
    for url, stamps in later.items():
        gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        assert all(abs(g - 0.2) < 1e-9 for g in gaps), (url, gaps)  # one interval apart
        assert all(_on_grid(t, 0.2) for t in stamps), (url, stamps)  # on the clock's multiples
    a, b = later["http://127.0.0.1:9001/metrics"], later["http://127.0.0.1:9002/metrics"]
    assert a[0] == pytest.approx(
        b[0] - 0.2
    )  # 1000.07 + 0.2 is due at 1000.2; 1000.14 + 0.2 is past half way to 1000.4
    assert b == a[1:]  # then the same ticks, the first loop's end notwithstanding
    assert len(b) >= 4


def test_scrapes_and_health_probes_fall_on_the_same_whole_seconds() -> None:
    """The scrape grid sits on the clock's multiples of its interval, and the supervisor's health
    loop sleeps to the next of them (at least half an interval on): an instance's two requests, answers
    and access-log lines come in the same wake-ups."""
    from types import SimpleNamespace

    from vtui.supervisor.supervisor_probe import to_grid

    times = _scrape_times(1.0, [0.3], cancel_first_after=4.0, then=0.0)
    assert times["http://127.0.0.1:9000/metrics"] == pytest.approx([1000.3, 1001.0, 1002.0, 1003.0, 1004.0])
    for now, delay in ((10.3, 0.7), (10.0, 1.0), (10.6, 1.4), (10.45, 0.55)):
        clock = SimpleNamespace(time=lambda now=now: now)
        assert abs(to_grid(clock, 1.0) - delay) < 1e-9  # type: ignore[arg-type]
