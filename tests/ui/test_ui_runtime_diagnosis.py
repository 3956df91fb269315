"""The runtime "KV cache short" diagnosis (telemetry.diagnosis.diagnose_runtime) on the dashboard card and
the detail screen, from metrics samples as the scraper delivers them."""

from __future__ import annotations

from vtui.ui.messages import MetricsArrived
from vtui.ui.screens.detail import DetailScreen
from vtui.ui.screens.dialogs import DiffScreen
from vtui.ui.textdump import screen_text


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


async def _feed(app, pilot, h, **overrides) -> None:
    for i in range(5):
        app.post_message(MetricsArrived(h.metrics("qwen", at=h.NOW - 5 + i, **overrides)))
        await pilot.pause()
    app.repaint()  # the render timer's pass
    await settle(pilot)


async def test_kv_full_with_waiting_and_preemptions_marks_the_card_and_the_detail_offers_a_fix(
    fake, app_factory, h
):
    app = app_factory(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await _feed(app, pilot, h)  # a healthy instance: 61 % KV, no preemptions
        assert "KV SHORT" not in screen_text(app)
        await _feed(app, pilot, h, kv_usage=1.0, waiting=40.0, preemptions_per_s=1.5)
        card = screen_text(app).splitlines()[2]
        assert card.startswith("> qwen") and "KV SHORT" in card  # the fleet row (header first)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DetailScreen)
        text = screen_text(app)
        assert "no problems found" not in text
        assert "KV cache 100% full, 40 waiting, 1.5 preemptions/s" in text
        # qwen runs at --gpu-memory-utilization 0.9: the first remedy a flag change applies
        assert "press 1: restart with --gpu-memory-utilization 0.92" in text
        await pilot.press("1")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        assert "--gpu-memory-utilization: 0.9 -> 0.92" in screen_text(app)


async def test_the_marker_goes_when_the_cache_has_room_again(fake, app_factory, h):
    app = app_factory(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await _feed(app, pilot, h, kv_usage=1.0, waiting=40.0, preemptions_per_s=2.0)
        assert "KV SHORT" in screen_text(app)
        await _feed(app, pilot, h, kv_usage=0.7, waiting=0.0, preemptions_per_s=0.0)
        assert "KV SHORT" not in screen_text(app)
        assert app.store.views["qwen"].runtime_problems == []
