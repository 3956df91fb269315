"""The flag editor says which schema checks the flags, and takes the instance's own vLLM's when it has
one (read in a worker thread: the screen opens at once on the bundled schema)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from _support.fake_vllm import make_fake_vllm
from textual.widgets import Input, Static

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


async def test_editor_plans_a_running_instance_from_the_budget_in_its_log(layout: Layout, app_factory):
    """The log's KV budget (10 GiB -> 145,632 tokens for Qwen3-8B TP 2), not the estimate, while the
    edits leave the budget alone; an edit of gpu-memory-utilization goes back to the estimate."""
    from vtui.core.state import State

    fake = FakeSupervisor(layout, auto_ready=False)
    app = app_factory(fake)
    async with app.run_test(size=(120, 60)) as pilot:
        for _ in range(3):
            await pilot.pause()
        fake.emit_logs(
            "qwen",
            [
                "INFO 01-01 12:00:01 [gpu_worker.py:298] Available KV cache memory: 10.00 GiB",
                "INFO 01-01 12:00:01 [kv_cache_utils.py:2327] GPU KV cache size: 145,632 tokens, Maximum "
                "concurrency for 8,192 tokens per request: 17.78x",
            ],
        )
        fake.set_state("qwen", State.READY)
        for _ in range(3):
            await pilot.pause()
        await pilot.press("f")
        for _ in range(200):
            if app.store.configs:
                break
            await pilot.pause(0.01)
        for _ in range(4):
            await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FlagEditorScreen)
        plan = screen.query_one("#flag-plan", Static).render().plain
        assert "KV tokens 145.6k" in plan and "log (0.01 GiB)" in plan, plan
        screen.query_one("#flag-max-num-seqs", Input).value = "32"  # does not move the budget
        for _ in range(4):
            await pilot.pause()
        assert "log (0.01 GiB)" in screen.query_one("#flag-plan", Static).render().plain
        screen.query_one("#flag-gpu-memory-utilization", Input).value = "0.5"
        for _ in range(4):
            await pilot.pause()
        assert "log (" not in screen.query_one("#flag-plan", Static).render().plain
