"""The dashboard's start (issue 15: first frame <= 1 s, `benchmarks/bench_ui_vs_htop.py`).

`vtui LAYOUT`'s start path (the CLI, the app, the session supervisor's client, the runtime diagnosis its
first samples run) must not load the modules of other screens, of other commands, of in-process
supervision, nor the heavy libraries those need: each was measured on that path and moved to where it
is used, and a new top-level import of one of them fails here. The start's other savings: the cyclic
collector off until the first frame, the hidden input boxes mounted on first use, and the dashboard
pushed with the session supervisor's first snapshot rather than painted before it."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

from vtui.testing.fake_supervisor import FakeSupervisor
from vtui.ui.textdump import screen_text

from .conftest import NOW

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
    "vtui.core.supervisor",
    "vtui.core.launcher",
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
            assert app.first_frame_at is not None and gc.isenabled()
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


class _HelloFeed(FakeSupervisor):
    """The fake supervisor with a session supervisor client's face: no snapshot until `hello()`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.feeds_gpu: bool | None = None
        self.facts: dict = {}
        self._on_statuses: list = []

    def subscribe_telemetry(self, callback):
        return lambda: None

    def subscribe_statuses(self, callback):
        self._on_statuses.append(callback)
        return lambda: None

    def hello(self) -> None:
        self.feeds_gpu = False
        for notify in self._on_statuses:
            notify()


def _dashboards(app) -> list:
    from vtui.ui.screens.dashboard import DashboardScreen

    return [s for s in app.screen_stack if isinstance(s, DashboardScreen)]


async def test_the_dashboard_is_shown_with_the_supervisors_first_snapshot(layout, app_factory):
    """A session supervisor's client: the dashboard is pushed once the hello's statuses are in the store
    (its first paint shows them), not painted first with states unknown."""
    feed = _HelloFeed(layout, clock=lambda: NOW - 60)
    app = app_factory(feed)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.pause()
        assert _dashboards(app) == [] and app.first_frame_at is None
        feed.hello()
        for _ in range(4):
            await pilot.pause()
        assert len(_dashboards(app)) == 1 and app.first_frame_at is not None
        assert "qwen" in screen_text(app)


async def test_without_a_snapshot_the_dashboard_shows_after_a_short_wait(layout, app_factory, monkeypatch):
    from vtui.ui import app as app_module

    monkeypatch.setattr(app_module, "HELLO_WAIT_S", 0.05)
    app = app_factory(_HelloFeed(layout, clock=lambda: NOW - 60))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.2)
        for _ in range(3):
            await pilot.pause()
        assert len(_dashboards(app)) == 1 and "qwen" in screen_text(app)
