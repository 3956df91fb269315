"""Manners: stop/restart ask first (a setting turns it off), quitting with unsaved changes warns and can
save them, up/down move between flag fields, every modal says esc closes, facts in one precision per
unit, no "Fix 1" key without a problem."""

from __future__ import annotations

from vtui.core.state import State
from vtui.ui import fmt
from vtui.ui.screens.dialogs import ConfirmScreen, QuitScreen
from vtui.ui.screens.flags import FlagEditorScreen
from vtui.ui.screens.help import HelpScreen
from vtui.ui.settings import UiSettings, load_settings
from vtui.ui.textdump import screen_text


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


async def test_stop_and_restart_ask_first(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen) and "Stop qwen?" in screen_text(app)
        await pilot.press("escape")  # no: nothing stopped
        await settle(pilot, 4)
        assert not any(c[0] == "stop" for c in fake.calls)
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen) and "esc closes" in screen_text(app)
        await pilot.press("y")
        await settle(pilot, 4)
        assert ("restart", "qwen", None) in fake.calls


async def test_confirmation_off_in_settings(fake, app_factory, tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text("[ui]\nconfirm = false\n")
    settings, problems = load_settings(path)
    assert settings == UiSettings(confirm=False) and problems == []
    path.write_text('[ui]\nconfirm = "no"\ncolour = 1\n')
    settings, problems = load_settings(path)
    assert settings.confirm is True
    assert any("ui.confirm: expected true or false" in p for p in problems)
    assert any("ui.colour: unknown setting" in p for p in problems)
    app = app_factory(fake, settings=UiSettings(confirm=False))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot, 4)
        assert not isinstance(app.screen, ConfirmScreen)
        assert fake.status()[0].state == State.STOPPED


async def test_quit_with_unsaved_changes_warns_and_saves(fake, app_factory, tmp_path):
    target = tmp_path / "demo.toml"
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        app.store.path = target
        spec = fake.layout.instance("qwen")
        fake._layout = fake.layout.replace_instance(spec.with_flags({"max-num-seqs": 64}))
        app.store.layout = fake.layout
        assert app.store.dirty
        await pilot.press("q")
        await settle(pilot)
        assert isinstance(app.screen, QuitScreen)
        text = screen_text(app)
        assert "unsaved changes" in text and "w: save the layout" in text and "esc closes" in text
        await pilot.press("w")
        await settle(pilot, 6)
    assert "max-num-seqs = 64" in target.read_text()
    assert fake.closed_with is False  # instances left running


async def test_quit_without_changes_has_no_save_key(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)
        assert "unsaved" not in screen_text(app)
        await pilot.press("w")  # not offered: nothing happens
        await settle(pilot)
        assert isinstance(app.screen, QuitScreen)


async def test_up_down_move_between_flag_fields(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.screen, FlagEditorScreen)
        first = app.focused
        await pilot.press("down")
        await settle(pilot)
        second = app.focused
        assert second is not first and second.name != first.name
        await pilot.press("up")
        await settle(pilot)
        assert app.focused is first
        assert "Next field" in screen_text(app)  # the footer says so


async def test_help_says_esc_closes(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen) and "esc closes" in screen_text(app)


def test_facts_in_one_precision_per_unit():
    assert fmt.fact("model_weights_gib", 15.2737) == ("model weights", "15.27 GiB")
    assert fmt.fact("model_load_secs", 1.622808) == ("model load", "1.62 s")
    assert fmt.fact("kv_cache_tokens", 81920) == ("kv cache tokens", "81,920")
    assert fmt.fact("max_concurrency", 10.0) == ("max concurrency", "10.0x")
    assert fmt.fact("gpu_memory_utilization", 0.9) == ("gpu memory utilization", "0.90")
    assert fmt.fact("engine", "V1") == ("engine", "V1")


async def test_no_fix_key_without_a_problem(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert "Fix 1" not in screen_text(app)


async def test_a_greyed_key_says_why_it_does_nothing(fake, app_factory):
    app = app_factory(fake, autostart=False)
    said: list[str] = []
    notify = app.notify

    def recording_notify(message, *args, **kw):
        said.append(str(message))
        return notify(message, *args, **kw)

    app.notify = recording_notify
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert app.screen.selected_name() == "qwen" and app.store.views["qwen"].state == State.STOPPED
        assert app.screen.check_action("stop", ()) is None  # greyed
        await pilot.press("x")
        await settle(pilot)
        assert said == ["qwen is STOPPED: nothing to stop"]
        assert "warning: qwen is STOPPED: nothing to stop" in screen_text(app)
        assert not isinstance(app.screen, ConfirmScreen) and not any(c[0] == "stop" for c in fake.calls)
        await pilot.press("x", "x")  # pressed again while it shows: still one notice
        await settle(pilot)
        assert said == ["qwen is STOPPED: nothing to stop"]
        await pilot.press("b")
        await settle(pilot)
        assert said[-1] == "qwen: no earlier flags to roll back to" and len(said) == 2
        await pilot.press("s")  # start applies: no notice, it starts
        await settle(pilot, 4)
        assert len(said) == 2 and fake.status()[0].state == State.READY
        await pilot.press("s")
        await settle(pilot)
        assert said[-1] == "qwen is already READY"


async def test_the_palette_has_one_quit_and_it_is_vtuis(fake, app_factory):
    from textual.command import CommandList, CommandPalette

    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        app.action_command_palette()
        await settle(pilot)
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"quit")
        found: list[str] = []
        for _ in range(40):  # the palette searches in a worker, its hits arrive in batches
            await pilot.pause(0.05)
            options = app.screen.query_one(CommandList)
            found = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
            if any("app: quit" in f for f in found):
                break
        quits = [f for f in found if "quit" in f.lower()]
        assert len(quits) == 1 and "app: quit" in quits[0], found
        await pilot.press("enter")  # it asks: leave, stop or cancel
        await settle(pilot)
        assert isinstance(app.screen, QuitScreen) and app.return_code is None


async def test_ctrl_q_asks_like_q_instead_of_exiting(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+q")
        await settle(pilot)
        assert isinstance(app.screen, QuitScreen) and app.return_code is None
        await pilot.press("ctrl+q")  # asked once, not twice
        await settle(pilot)
        assert len([s for s in app.screen_stack if isinstance(s, QuitScreen)]) == 1
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, QuitScreen) and app.return_code is None
