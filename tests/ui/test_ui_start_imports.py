"""The dashboard's first frame imports only what it shows (issue 15: first frame <= 1 s,
`benchmarks/bench_ui_vs_htop.py`). `vtui LAYOUT`'s start path (the CLI, the app, the session
supervisor's client, the runtime diagnosis its first samples run) must not load the modules of other
screens, of other commands, of in-process supervision, nor the heavy libraries those need: each was
measured on that path and moved to where it is used. A new top-level import of one of them fails here."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

START_PATH = ("vtui.cli", "vtui.ui.app", "vtui.service.remote", "vtui.telemetry.diagnosis")

NOT_AT_START = (
    # libraries: process tables (the supervisor walks them), HTTP clients, TOML editing, plotting
    "psutil",
    "httpx",
    "tomlkit",
    "textual_plotext",
    "plotext",
    # the startup-log parser (its regexes: 20-30 ms); the hello's facts are vtui.telemetry.facts
    "vtui.telemetry.startup_log",
    # screens and dialogs other than the dashboard
    "vtui.ui.screens.dialogs",
    "vtui.ui.screens.detail",
    "vtui.ui.screens.logs",
    "vtui.ui.screens.flags",
    "vtui.ui.screens.bench",
    "vtui.ui.screens.tune",
    "vtui.ui.screens.help",
    "vtui.ui.screens.presets",
    "vtui.ui.presets",
    # the flag schema's save check, the planner, the bench, headless commands
    "vtui.telemetry.flagschema",
    "vtui.planner",
    "vtui.bench",
    "vtui.commands",
    # in-process supervision and its scrape loop (the session supervisor does both), other hosts
    "vtui.supervisor.supervisor",
    "vtui.supervisor.launcher",
    "vtui.telemetry.scrape",
    "vtui.service.hosts",
)


def _loaded(modules: tuple[str, ...]) -> set[str]:
    code = f"import json, sys; import {', '.join(modules)}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout))


def test_the_dashboards_start_path_imports_only_what_its_first_frame_shows() -> None:
    loaded = _loaded(START_PATH)
    assert "textual.app" in loaded and "h11" in loaded  # the path was imported at all
    assert [m for m in NOT_AT_START if m in loaded] == []


def test_the_startup_facts_have_one_home() -> None:
    """The parser re-exports the record the hello decodes: one class, whichever module names it."""
    from vtui.service import wire
    from vtui.telemetry import facts, startup_log

    assert startup_log.StartupFacts is facts.StartupFacts is wire.StartupFacts
    assert startup_log.FACT_KEYS is facts.FACT_KEYS
    parsed = startup_log.parse_startup(["INFO 01-01 00:00:00 Using max model len 4096"])
    assert isinstance(parsed, facts.StartupFacts) and parsed.max_model_len == 4096


async def test_the_first_frame_turns_the_collector_back_on(fake, app_factory):
    """`vtui LAYOUT` starts with the cyclic collector off (vtui.cli); the first frame turns it on."""
    gc.disable()
    try:
        app = app_factory(fake)
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(3):
                await pilot.pause()
            assert app.startup.first_frame_at is not None and gc.isenabled()
    finally:
        gc.enable()


async def test_the_dashboard_mounts_its_input_boxes_on_first_use(fake, app_factory):
    """The `/` filter and the `:` line are hidden until asked for: mounted then, not at the first frame
    (two Inputs' styles); once mounted they stay (the filter box keeps its text)."""
    from textual.widgets import Input

    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(3):
            await pilot.pause()
        assert list(app.screen.query(Input)) == []
        await pilot.press("slash", "l", "l", "a", "enter")
        for _ in range(3):
            await pilot.pause()
        box = app.screen.query_one("#fleet-filter", Input)
        assert box.value == "lla" and box.display and app.screen.table.filter == "lla"
        await pilot.press("colon")
        await pilot.pause()
        assert app.focused is app.screen.query_one("#command-input", Input)
        assert len(app.screen.query(Input)) == 2
