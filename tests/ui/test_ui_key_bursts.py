"""Keys that reach vtui in one burst (a fast typist, a paste, tmux send-keys) act in the order typed:
an Input's own bindings (ctrl+u) are not overtaken by the characters after them, and a screen's priority
binding (ctrl+r) sees the text typed before it."""

from __future__ import annotations

from textual import events

from vtui.ui.screens.dialogs import DiffScreen
from vtui.ui.screens.flags import FlagEditorScreen
from vtui.ui.textdump import screen_text


def burst(app, *keys: str) -> None:
    """Post every key to the app at once, as a terminal read delivers them (Pilot.press waits between keys)."""
    for key in keys:
        char = key if len(key) == 1 else None
        app.post_message(events.Key(key, char))


async def settle(pilot, n: int = 5) -> None:
    for _ in range(n):
        await pilot.pause()


async def eventually(pilot, condition, timeout: float = 3.0) -> None:
    """Let the burst play out (keys hop between message queues): until `condition` holds, or fail."""
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await pilot.pause(0.02)
    assert condition()


async def open_editor(app, pilot):
    await settle(pilot)
    await pilot.press("f")
    await settle(pilot)
    assert isinstance(app.screen, FlagEditorScreen)
    box = app.screen.query_one("#flag-max-num-seqs")
    box.focus()
    await settle(pilot)
    return box


async def test_ctrl_u_then_digits_in_one_burst_leaves_the_digits(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        box = await open_editor(app, pilot)
        assert box.value == "256"
        burst(app, "end", "ctrl+u", "6", "4")
        await eventually(pilot, lambda: box.value == "64")
        await settle(pilot)
        assert box.value == "64"


async def test_ctrl_r_right_after_typing_reviews_the_typed_value(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_editor(app, pilot)
        burst(app, "end", "backspace", "backspace", "backspace", "3", "2", "ctrl+r")
        await eventually(pilot, lambda: isinstance(app.screen, DiffScreen))
        await settle(pilot)
        assert "--max-num-seqs: 256 -> 32" in screen_text(app)


async def test_ctrl_r_right_after_an_invalid_value_restarts_nothing(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        box = await open_editor(app, pilot)
        burst(app, "end", "x", "ctrl+r")
        await eventually(pilot, lambda: "expected an integer" in screen_text(app))
        await settle(pilot)
        assert box.value == "256x"
        assert isinstance(app.screen, FlagEditorScreen)
        assert "expected an integer" in screen_text(app)


async def test_tab_then_a_digit_types_into_the_next_field(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        box = await open_editor(app, pilot)
        burst(app, "tab", "7")
        await eventually(pilot, lambda: app.focused is not box and getattr(app.focused, "value", None) == "7")
        assert box.value == "256"
        assert app.focused is not box and app.focused.value == "7"


async def test_a_key_right_after_enter_does_not_change_the_path_being_saved(
    fake, app_factory, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # a mangled (relative) path lands here, not in the checkout
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("S")  # save as: a dialog with a path input
        await eventually(pilot, lambda: bool(app.screen.query("#path-input")))
        app.screen.query_one("#path-input").value = str(tmp_path / "burst.toml")
        burst(app, "enter", "j")  # Textual alone would type the j first: burst.tomlj
        await eventually(pilot, lambda: (tmp_path / "burst.toml").exists())
        await settle(pilot)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["burst.toml"]
        assert app.is_running


async def test_edit_review_and_confirm_in_one_burst_restarts_with_the_typed_value(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        box = await open_editor(app, pilot)
        burst(app, "end", "ctrl+u", "4", "ctrl+r", "y")  # the y answers the diff opened by ctrl+r
        await eventually(pilot, lambda: any(c[0] == "restart" for c in fake.calls), timeout=5)
        restart = next(c for c in fake.calls if c[0] == "restart")
        assert restart[2]["max-num-seqs"] == 4 and box.value == "4"


async def test_twenty_keys_in_one_burst_across_screen_pushes_and_pops(
    fake, app_factory, tmp_path, monkeypatch
):
    """Save as (a dialog pushed), a path typed into it at once, enter (the dialog popped), then keys for
    the dashboard, a detail screen pushed and popped, and the dashboard again: none lost, none misplaced."""
    from vtui.ui.screens.dashboard import DashboardScreen
    from vtui.ui.screens.detail import DetailScreen
    from vtui.ui.screens.dialogs import PathScreen

    monkeypatch.chdir(tmp_path)  # the relative path typed lands here
    app = app_factory(fake)
    pushed: list[str] = []
    push_screen = app.push_screen

    def recording_push(screen, *args, **kw):
        pushed.append(f"{type(screen).__name__}:{getattr(screen, 'instance', '')}")
        return push_screen(screen, *args, **kw)

    app.push_screen = recording_push
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        pushed.clear()  # (the dashboard's own push)
        keys = ["S", "ctrl+u", *"layout1.toml", "enter", "j", "enter", "escape", "j", "k"]
        assert len(keys) == 20
        burst(app, *keys)
        await eventually(pilot, lambda: (tmp_path / "layout1.toml").exists() and len(pushed) == 2, timeout=5)
        await eventually(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await settle(pilot)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["layout1.toml"]
        assert pushed == [f"{PathScreen.__name__}:", f"{DetailScreen.__name__}:llama"]
        assert isinstance(app.screen, DashboardScreen) and app.screen.selected_name() == "llama"
        assert [type(s).__name__ for s in app.screen_stack][-1:] == ["DashboardScreen"]
