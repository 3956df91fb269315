"""The supervisor's scrape loops share one grid: after its first scrape (at once), every loop of an
interval scrapes on the same ticks, one interval apart, and a cancelled loop does not disturb the others."""

from __future__ import annotations

import asyncio
from pathlib import Path

from vtui.bench.lean_http import Response
from vtui.service.probes import LeanScrapeLoop

PAYLOAD = (Path(__file__).parents[1] / "telemetry" / "fixtures" / "metrics_idle.txt").read_bytes()


class FakePool:
    def __init__(self, times: dict[str, list[float]]) -> None:
        self.times = times

    async def request(self, method: str, url: str, **_: object) -> Response:
        self.times.setdefault(url, []).append(asyncio.get_running_loop().time())
        return Response(200, {}, PAYLOAD)


def test_scrape_loops_share_one_grid() -> None:
    async def main() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {}
        pool = FakePool(times)
        samples: list[object] = []
        loops = [
            LeanScrapeLoop(
                f"i{i}", f"http://127.0.0.1:{9000 + i}", samples.append, lambda: pool, interval=0.2
            )  # type: ignore[arg-type,return-value]
            for i in range(3)
        ]
        tasks = []
        for loop in loops:
            tasks.append(asyncio.ensure_future(loop.run()))
            await asyncio.sleep(0.07)  # started out of phase
        await asyncio.sleep(0.5)
        tasks[0].cancel()  # one loop ends: the others keep their ticks
        await asyncio.sleep(0.6)
        for task in tasks[1:]:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert len(samples) == sum(len(t) for t in times.values())
        return times

    times = asyncio.run(main())
    later = {url: t[1:] for url, t in times.items()}  # after each loop's first scrape
    for url, stamps in later.items():
        gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        assert all(0.15 < g < 0.3 for g in gaps), (url, gaps)  # one interval apart (a loaded box: slack)
    a, b = later["http://127.0.0.1:9001/metrics"], later["http://127.0.0.1:9002/metrics"]
    shared = min(len(a), len(b))
    assert shared >= 4
    assert all(abs(x - y) < 0.05 for x, y in zip(a[-shared:], b[-shared:], strict=True))  # the same ticks


def test_scrapes_and_health_probes_fall_on_the_same_whole_seconds() -> None:
    """The scrape grid sits on the wall clock's multiples of its interval, and the supervisor's health
    loop sleeps to the next of them (at least half an interval on): an instance's two requests, answers
    and access-log lines come in the same wake-ups."""
    import time
    from types import SimpleNamespace

    from vtui.service.probes import _Beat
    from vtui.supervisor.supervisor_probe import to_grid

    async def origin_offset() -> float:
        loop = asyncio.get_running_loop()
        beat = _Beat(loop, 1.0)
        return (time.time() + (beat.origin + 5 - loop.time())) % 1.0

    offset = asyncio.run(origin_offset())
    assert min(offset, 1.0 - offset) < 0.01
    for now, delay in ((10.3, 0.7), (10.0, 1.0), (10.6, 1.4), (10.45, 0.55)):
        clock = SimpleNamespace(time=lambda now=now: now)
        assert abs(to_grid(clock, 1.0) - delay) < 1e-9  # type: ignore[arg-type]
