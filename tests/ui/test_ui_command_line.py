"""The `:` command line (k9s style) and the notice line: commands by name from the key registry with
completion, esc closes, a clear error for what cannot run; notifications on the reserved row above the
footer, never over the fleet rows or the GPU panel."""

from __future__ import annotations

import pytest

from vtui.core.state import State
from vtui.ui import cmdline
from vtui.ui.keymap import REGISTRY
from vtui.ui.screens.dialogs import ConfirmScreen, QuitScreen
from vtui.ui.screens.help import HelpScreen
from vtui.ui.textdump import screen_text
from vtui.ui.widgets.gpu_panel import gpu_text
from vtui.ui.widgets.notices import NoticeLine

NAMES = ["qwen", "llama", "embed"]


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


def test_every_dashboard_binding_is_a_command():
    table = cmdline.commands()
    for group in ("app", "instance (dashboard, detail)", "dashboard"):
        for b in REGISTRY[group]:
            if b.id and b.id != "dashboard.command":
                assert b.id.split(".", 1)[1].replace("_", "-") in table
    assert {"restart", "stop", "bench", "theme", "quit", "save-as", "sleep-toggle"} <= set(table)


def test_parse_and_complete():
    themes = ["textual-dark", "textual-light"]
    assert cmdline.parse(":restart qwen", NAMES)[0].action == "restart"
    assert cmdline.parse("restart qwen", NAMES)[1] == "qwen"
    assert cmdline.parse("q", NAMES)[0].name == "quit"
    assert cmdline.parse("Stop", NAMES) == (cmdline.commands()["stop"], None)
    assert cmdline.parse("theme textual-light", NAMES, themes)[1] == "textual-light"
    assert cmdline.complete("res", NAMES) == "restart"
    assert cmdline.complete("restart l", NAMES) == "restart llama"
    assert cmdline.complete("theme textual-l", NAMES, themes) == "theme textual-light"
    assert cmdline.complete("zzz", NAMES) is None
    with pytest.raises(cmdline.CommandError, match='unknown command "restrat"; did you mean "restart"'):
        cmdline.parse("restrat qwen", NAMES)
    with pytest.raises(
        cmdline.CommandError, match='no instance "mistral" \\(instances: qwen, llama, embed\\)'
    ):
        cmdline.parse("stop mistral", NAMES)
    with pytest.raises(cmdline.CommandError, match="quit takes no argument"):
        cmdline.parse("quit now", NAMES)
    with pytest.raises(cmdline.CommandError, match='no theme "pink"'):
        cmdline.parse("theme pink", NAMES, themes)


async def test_command_line_runs_actions_by_name(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("colon")
        await settle(pilot)
        assert app.focused is not None and app.focused.id == "command-input"
        await pilot.press(*"restart l", "tab")  # completes the instance name
        await settle(pilot)
        assert app.focused.value == "restart llama "
        await pilot.press("enter")
        await settle(pilot, 4)
        assert isinstance(app.screen, ConfirmScreen) and "Restart llama?" in screen_text(app)
        await pilot.press("y")
        await settle(pilot, 4)
        assert ("restart", "llama", None) in fake.calls
        assert app.screen.selected_name() == "llama"  # the command's instance is selected
        # esc closes without running anything
        calls = len(fake.calls)
        await pilot.press("colon", *"stop", "escape")
        await settle(pilot)
        assert not app.screen.query_one("#command-line").display and app.focused is None
        assert len(fake.calls) == calls
        # an app command, then a dashboard one
        theme = app.theme
        await pilot.press("colon", *"theme", "enter")
        await settle(pilot)
        assert app.theme != theme
        await pilot.press("colon", *"help", "enter")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("colon", "q", "enter")
        await settle(pilot)
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape")


async def test_command_line_errors_are_clear(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(110, 30)) as pilot:
        await settle(pilot)
        await pilot.press("colon", *"frobnicate", "enter")
        await settle(pilot)
        line = app.screen.query_one(NoticeLine).plain
        assert line.startswith('error: unknown command "frobnicate"') and "tab completes" in line
        fake.set_state("embed", State.STOPPED)
        await settle(pilot)
        await pilot.press("colon", *"bench embed", "enter")  # bench needs READY: greyed, so refused
        await settle(pilot)
        assert "bench: not available for embed now (STOPPED)" in app.screen.query_one(NoticeLine).plain
        assert not any(c[0] == "bench" for c in fake.calls) and app.screen.id == "dashboard"


async def test_startup_notifications_never_cover_data(fake, app_factory, h, tmp_path):
    """Startup problems (here: a keys.toml with two bad entries, as vtui shows them on mount) go to the
    notice line: every fleet row and every GPU panel line is on screen in full while they show."""
    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"instance.nope" = "ctrl+x"\n"app.help" = 3\n')
    app = app_factory(fake, keymap_path=keys)
    async with app.run_test(size=(100, 30), notifications=True) as pilot:  # Textual's toasts on, too
        await settle(pilot, 5)
        app.notify("preflight: port 8003 is held by pid 4242 (nginx)", severity="error", timeout=10)
        await settle(pilot)
        text = screen_text(app)
        lines = text.splitlines()
        line = app.screen.query_one(NoticeLine).plain
        assert line.startswith("error: preflight: port 8003") and "(+2 more)" in line
        assert lines[-2].strip() == line.strip()  # the reserved row above the footer
        for name in ("qwen", "llama", "embed", "ALL"):
            row = next(r for r in lines if r.lstrip("> ").startswith(name))
            assert "READY" in row or name == "ALL"
        width = app.screen.query_one("#gpu-panel").content_size.width
        panel = gpu_text(app.store.gpu, app.store.names(), width, app.screen._commands).plain.splitlines()
        assert len(panel) == 9  # 4 GPUs, the table head, 4 processes
        for gpu_line in panel:
            assert gpu_line.strip() in text, gpu_line


def test_theme_stays_a_command_without_a_key(monkeypatch):
    import vtui.ui.cmdline as cmd

    apps = [b for b in REGISTRY["app"] if b.id != "app.theme"]
    monkeypatch.setitem(cmd.REGISTRY, "app", apps)
    assert cmd.commands()["theme"].action == "cycle_theme"
