"""The flag editor shows the seeds' advice for the flags as edited, and drops it when the value changes."""

from __future__ import annotations

from vtui.ui.screens.flags import FlagEditorScreen
from vtui.ui.textdump import screen_text


async def settle(pilot, n: int = 4) -> None:
    for _ in range(n):
        await pilot.pause()


async def test_advice_follows_the_edited_utilization(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(110, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.screen, FlagEditorScreen)
        assert "is above 0.95" not in screen_text(app)  # qwen runs at 0.9
        box = app.screen.query_one("#flag-gpu-memory-utilization")
        box.value = "0.97"
        await settle(pilot)
        assert "--gpu-memory-utilization 0.97 is above 0.95" in screen_text(app)
        box.value = "0.9"
        await settle(pilot)
        assert "is above 0.95" not in screen_text(app)
