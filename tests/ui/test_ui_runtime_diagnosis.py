"""The runtime "KV cache short" diagnosis (telemetry.kvshort.KvShortWatch) on the dashboard card and
the detail screen, from metrics samples as the scraper delivers them, and its one-key fix: through the
supervisor's queue as a "fix" that goes back to the old flags when the new ones do not start."""

from __future__ import annotations

from vtui.core.state import State
from vtui.telemetry.kvshort import KV_SHORT_ENTER_S, KV_SHORT_LEAVE_S
from vtui.testing.fake_supervisor import FakeSupervisor
from vtui.ui.messages import MetricsArrived
from vtui.ui.screens.dashboard import DashboardScreen
from vtui.ui.screens.detail import DetailScreen
from vtui.ui.screens.dialogs import DiffScreen
from vtui.ui.textdump import screen_text

SHORT = dict(kv_usage=1.0, waiting=40.0, preemptions_per_s=1.5)  # full, a queue, preempting
OOM = [
    "ERROR 01-01 12:00:05 [core.py:2] EngineCore failed to start.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
]


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


class Feed:
    """One sample a second on the samples' own clock (what the hysteresis counts), from 10 min ago."""

    def __init__(self, app, pilot, h) -> None:
        self.app, self.pilot, self.h = app, pilot, h
        self.at = h.NOW - 600

    async def __call__(self, seconds: float, name: str = "qwen", **overrides) -> None:
        for _ in range(int(seconds)):
            self.app.post_message(MetricsArrived(self.h.metrics(name, at=self.at, **overrides)))
            self.at += 1.0
            await self.pilot.pause()
        self.app.repaint()  # the render timer's pass
        await settle(self.pilot)


def card(app) -> str:
    return next(ln for ln in screen_text(app).splitlines() if ln[2:].startswith("qwen"))


async def open_fix(app, pilot) -> None:
    await pilot.press("enter")
    await settle(pilot)
    assert isinstance(app.screen, DetailScreen)
    await pilot.press("1")
    await settle(pilot)
    assert isinstance(app.screen, DiffScreen)


async def test_kv_short_shows_after_lasting_pressure_and_its_fix_is_applied(fake, app_factory, h):
    app = app_factory(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        feed = Feed(app, pilot, h)
        await feed(5)  # a healthy instance: 61 % KV, no preemptions
        assert "KV SHORT" not in card(app)
        await feed(KV_SHORT_ENTER_S - 1, **SHORT)
        assert "KV SHORT" not in card(app)  # not yet: a short burst is no shortage
        await feed(2, **SHORT)
        assert "KV SHORT" in card(app)
        await pilot.press("enter")
        await settle(pilot)
        text = screen_text(app)
        assert "KV cache 100% full, 40 waiting, 1.5 preemptions/s" in text
        # qwen runs at --gpu-memory-utilization 0.9: the first remedy a flag change applies
        assert "press 1: restart with --gpu-memory-utilization 0.92" in text
        await pilot.press("1")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        assert "--gpu-memory-utilization: 0.9 -> 0.92" in screen_text(app)
        await pilot.press("enter")
        await settle(pilot, 6)
        assert fake.restarts[-1] == ("qwen", "fix", True)  # serving: back to these flags if it fails
        view = app.store.views["qwen"]
        assert view.state is State.READY and view.spec.flags["gpu-memory-utilization"] == 0.92
        assert "qwen: fix applied, READY with the new flags" in screen_text(app)
        assert view.runtime_problems == [] and view.flag_history[-1].note == "fix: kv_cache_short"


async def test_the_marker_stays_through_flicker_and_goes_after_lasting_relief(fake, app_factory, h):
    app = app_factory(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        feed = Feed(app, pilot, h)
        await feed(KV_SHORT_ENTER_S + 1, **SHORT)
        assert "KV SHORT" in card(app)
        for _ in range(3):  # the queue empties for a scrape, the cache dips between the thresholds
            await feed(1, kv_usage=0.97, waiting=0.0, preemptions_per_s=0.0)
            await feed(2, kv_usage=0.9, waiting=3.0, preemptions_per_s=0.0)
            assert "KV SHORT" in card(app)
        await feed(KV_SHORT_LEAVE_S - 1, kv_usage=0.7, waiting=0.0, preemptions_per_s=0.0)
        assert "KV SHORT" in card(app)  # relief, not yet for long enough
        await feed(2, kv_usage=0.7, waiting=0.0, preemptions_per_s=0.0)
        assert "KV SHORT" not in card(app)
        assert app.store.views["qwen"].runtime_problems == []


async def test_the_fix_raises_kv_cache_memory_bytes_when_it_is_set(layout, app_factory, h):
    qwen = layout.instance("qwen").with_flags({"kv-cache-memory-bytes": 8 * 2**30})
    fake = FakeSupervisor(layout.replace_instance(qwen), clock=lambda: h.NOW - 3725)
    app = app_factory(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await Feed(app, pilot, h)(KV_SHORT_ENTER_S + 1, **SHORT)
        await open_fix(app, pilot)
        text = screen_text(app)
        assert f"--kv-cache-memory-bytes: {8 * 2**30} -> {10 * 2**30}" in text
        assert "gpu-memory-utilization" not in text  # vLLM sizes the cache from the bytes alone


async def test_a_fix_that_does_not_start_goes_back_and_rollback_still_works(fake, app_factory, h):
    fake._fail = lambda s: OOM if s.flags.get("gpu-memory-utilization") == 0.92 else None
    app = app_factory(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await Feed(app, pilot, h)(KV_SHORT_ENTER_S + 1, **SHORT)
        await open_fix(app, pilot)
        await pilot.press("enter")
        await settle(pilot, 8)
        view = app.store.views["qwen"]
        assert view.state is State.READY and view.spec.flags["gpu-memory-utilization"] == 0.9
        text = screen_text(app)
        assert "the new flags did not start; back on the old flags" in text
        outcomes = [(r.flags.get("gpu-memory-utilization"), r.outcome) for r in view.flag_history]
        assert outcomes[-2:] == [(0.92, "failed"), (0.9, "ready")]
        await pilot.press("escape")  # the dashboard: `b` applies (back to the flags before the revert)
        await settle(pilot)
        assert isinstance(app.screen, DashboardScreen) and app.screen.check_action("rollback", ()) is True
        await pilot.press("b")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen) and "--gpu-memory-utilization: 0.9 -> 0.92" in screen_text(
            app
        )
        await pilot.press("enter")
        await settle(pilot, 8)
        assert fake.restarts[-1] == ("qwen", "rollback", True)


async def test_a_fix_refused_by_preflight_stops_nothing(layout, app_factory, h):
    def preflight(lay):
        util = lay.instance("qwen").flags.get("gpu-memory-utilization")
        return (
            ["GPU 0 has 10.00 GiB free, less than gpu-memory-utilization 0.92 asks"] if util == 0.92 else []
        )

    fake = FakeSupervisor(layout, clock=lambda: h.NOW - 3725, preflight=preflight)
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await Feed(app, pilot, h)(KV_SHORT_ENTER_S + 1, **SHORT)
        await open_fix(app, pilot)
        await pilot.press("enter")
        await settle(pilot, 6)
        assert "fix qwen: not applied, nothing was stopped: GPU 0 has 10.00 GiB free" in screen_text(app)
        assert ("stop", ("qwen",)) not in fake.calls and app.store.views["qwen"].state is State.READY


async def test_the_detail_screen_shows_the_operation_queue(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert "operation:" not in screen_text(app)
        fake.set_state("qwen", State.STOPPING, operation="stop", waiting="fix")  # the stop was first
        await settle(pilot)
        assert "operation: stop running; fix waits its turn" in screen_text(app)
        fake.set_state("qwen", State.STOPPED, operation=None, waiting=None)
        await settle(pilot)
        assert "operation:" not in screen_text(app)


async def test_a_fix_key_that_does_nothing_says_why(layout, app_factory, h):
    """No remedy left that a flag change applies (the utilization at the edge, max-num-seqs under the
    running batch, fp8 already): `1` is greyed, and pressed says why; `2` names no problem."""
    flags = {"gpu-memory-utilization": 0.95, "max-num-seqs": 4, "kv-cache-dtype": "fp8"}
    qwen = layout.instance("qwen").with_flags(flags)
    fake = FakeSupervisor(layout.replace_instance(qwen), clock=lambda: h.NOW - 3725)
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await Feed(app, pilot, h)(KV_SHORT_ENTER_S + 1, **SHORT)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DetailScreen) and app.screen.check_action("fix", (0,)) is None
        await pilot.press("1")
        await settle(pilot)
        assert not isinstance(app.screen, DiffScreen)
        assert "qwen: no flag change fixes problem 1 (kv_cache_short)" in screen_text(app)
        await pilot.press("2")
        await settle(pilot)
        assert "qwen: no problem 2 diagnosed" in screen_text(app)
