"""The flag editor says which schema checks the flags, and takes the instance's own vLLM's when it has
one (read in a worker thread: the screen opens at once on the bundled schema)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from _support.fake_vllm import make_fake_vllm
from textual.widgets import Input

from vtui.core.model import Layout
from vtui.testing.fake_supervisor import FakeSupervisor
from vtui.ui.screens.flags import FlagEditorScreen
from vtui.ui.textdump import screen_text

NOW = 1_700_000_000.0  # the clock of tests/ui/conftest.py


async def _open_editor(app, pilot, wait_for: str) -> str:
    for _ in range(4):
        await pilot.pause()
    await pilot.press("f")
    for _ in range(600):  # the first read of a version imports the (fake) vLLM: a subprocess
        await pilot.pause()
        text = screen_text(app)
        if wait_for in text:
            return text
        await asyncio.sleep(0.05)
    return screen_text(app)


async def test_sim_instance_uses_the_bundled_schema(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(110, 50)) as pilot:
        text = await _open_editor(app, pilot, "the simulated engine")
        assert isinstance(app.screen, FlagEditorScreen)
        assert "flags: vtui's bundled vLLM 0.32.0 schema: the simulated engine" in text


async def test_vllm_instance_uses_its_installed_vllm(layout: Layout, app_factory, tmp_path):
    vllm = make_fake_vllm(tmp_path / "fake")
    first = layout.instances[0]
    spec = replace(first, engine="vllm", command=(str(vllm), "serve"))
    supervisor = FakeSupervisor(layout.replace_instance(spec), clock=lambda: NOW - 3725)
    app = app_factory(supervisor)
    async with app.run_test(size=(110, 50)) as pilot:
        text = await _open_editor(app, pilot, "installed vLLM 0.99.0")
        assert "flags: installed vLLM 0.99.0 (installed)" in text
        screen = app.screen
        assert isinstance(screen, FlagEditorScreen)
        box = screen.query_one("#add-name", Input)
        box.value = "fancy-new-flag"  # not in 0.32: the bundled schema would refuse it
        await box.action_submit()
        for _ in range(40):
            await pilot.pause()
            if screen.query("#flag-fancy-new-flag"):
                break
        assert screen.query("#flag-fancy-new-flag")
        assert "--fancy-new-flag: not a flag" not in screen_text(app)
