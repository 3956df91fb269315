"""Flag edits not applied are held by the session's owner (here the fake supervisor, as the session
supervisor holds them): leaving the editor keeps them (`[+] unsaved`, the quit dialog names them), a
dashboard opened later shows the same edits, applying or discarding clears them, secrets are not kept."""

from __future__ import annotations

from vtui.core.masking import MASK
from vtui.core.state import State
from vtui.ui.screens.dashboard import DashboardScreen
from vtui.ui.screens.dialogs import DiffScreen, QuitScreen
from vtui.ui.screens.flags import KEEP_AFTER_S, FlagEditorScreen
from vtui.ui.textdump import screen_text


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


async def open_editor(pilot, app) -> FlagEditorScreen:
    await pilot.press("f")  # the selected instance: qwen
    await settle(pilot)
    assert isinstance(app.screen, FlagEditorScreen) and app.screen.instance == "qwen"
    return app.screen


async def test_leaving_the_editor_keeps_the_edits_and_the_quit_dialog_names_them(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert "[+] unsaved" not in screen_text(app)
        editor = await open_editor(pilot, app)
        editor.query_one("#flag-max-num-seqs").value = "64"
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, DashboardScreen)
        assert fake.pending_edits()["qwen"]["max-num-seqs"] == 64
        assert fake.pending_edits()["qwen"]["tensor-parallel-size"] == 2  # the whole set as edited
        assert fake.layout.instance("qwen").flags["max-num-seqs"] == 256  # nothing applied
        text = screen_text(app)
        assert "[+] unsaved" in text and "edits: qwen" in text
        await pilot.press("q")
        await settle(pilot)
        assert isinstance(app.screen, QuitScreen) and "Flag edits of qwen are not applied" in screen_text(app)
        await pilot.press("escape")
        await settle(pilot)

        editor = await open_editor(pilot, app)  # reopened: the edits are back in the rows
        assert editor.query_one("#flag-max-num-seqs").value == "64"
        assert "[+] unsaved edits" in screen_text(app)
        await pilot.press("ctrl+z")
        await settle(pilot)
        assert editor.query_one("#flag-max-num-seqs").value == "256"
        assert fake.pending_edits() == {} and ("set_pending", "qwen", None) in fake.calls
        await pilot.press("escape")
        await settle(pilot)
        assert "[+] unsaved" not in screen_text(app)


async def test_typing_hands_the_edits_over_once_it_pauses(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        editor = await open_editor(pilot, app)
        editor.query_one("#flag-max-model-len").value = "4096"
        await settle(pilot)
        assert "qwen" not in fake.pending_edits()  # not on every key
        await pilot.pause(KEEP_AFTER_S + 0.3)
        assert fake.pending_edits()["qwen"]["max-model-len"] == 4096  # while the editor stays open


async def test_a_dashboard_opened_later_shows_the_edits_and_applying_clears_them(fake, app_factory):
    first = app_factory(fake)
    async with first.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        editor = await open_editor(pilot, first)
        editor.query_one("#flag-max-num-seqs").value = "64"
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
    assert "qwen" in fake.pending_edits()  # the first dashboard is gone; its edits are not

    second = app_factory(fake)
    async with second.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        text = screen_text(second)
        assert "[+] unsaved" in text and "edits: qwen" in text
        editor = await open_editor(pilot, second)
        assert editor.query_one("#flag-max-num-seqs").value == "64"
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert isinstance(second.screen, DiffScreen) and "--max-num-seqs: 256 -> 64" in screen_text(second)
        await pilot.press("enter")
        await settle(pilot, 6)
        view = second.store.views["qwen"]
        assert view.state == State.READY and view.spec.flags["max-num-seqs"] == 64
        assert fake.pending_edits() == {}
        assert "[+] unsaved edits" not in screen_text(second) and "edits: qwen" not in screen_text(second)


async def test_a_secret_typed_into_the_editor_is_never_kept(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        editor = await open_editor(pilot, app)
        editor.query_one("#add-name").value = "api-key"
        await pilot.press("enter")
        await settle(pilot)
        editor.query_one("#flag-api-key").value = "s3cret"
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert fake.pending_edits()["qwen"]["api-key"] == MASK
        assert "s3cret" not in repr(fake.pending_edits()) and "s3cret" not in repr(app.store.pending)


async def test_a_restart_by_another_client_rebases_the_kept_edits_and_shows_the_conflict(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot)
        editor = await open_editor(pilot, app)
        editor.query_one("#flag-max-num-seqs").value = "64"  # the user: 256 -> 64
        editor.query_one("#flag-gpu-memory-utilization").value = "0.8"  # and 0.9 -> 0.8
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert fake.pending_edits()["qwen"]["max-num-seqs"] == 64

        # another client restarts qwen with max-num-seqs 128 and max-model-len 4096
        spec = fake.layout.instance("qwen")
        other = spec.with_flags({**spec.flags, "max-num-seqs": 128, "max-model-len": 4096})
        await fake.restart("qwen", other)
        await settle(pilot, 6)
        kept = fake.pending_edits()["qwen"]
        assert kept["max-model-len"] == 4096 and kept["max-num-seqs"] == 64  # the other's 4096 stays
        assert kept["gpu-memory-utilization"] == 0.8

        editor = await open_editor(pilot, app)
        assert editor.query_one("#flag-max-num-seqs").value == "64"
        assert editor.query_one("#flag-max-model-len").value == "4096"
        text = screen_text(app)
        assert "conflict --max-num-seqs: your 64 kept" in text and "with 128" in text and "from 256" in text
        await pilot.press("ctrl+r")
        await settle(pilot)
        diff = screen_text(app)
        assert isinstance(app.screen, DiffScreen) and "--max-num-seqs: 128 -> 64" in diff
        assert "max-model-len" not in diff  # applying does not revert the other client's change
        await pilot.press("enter")
        await settle(pilot, 6)
        assert fake.layout.instance("qwen").flags["max-model-len"] == 4096
        assert fake.layout.instance("qwen").flags["max-num-seqs"] == 64
        assert fake.pending_edits() == {} and fake.pending_conflicts() == {}


async def test_an_open_editor_follows_a_restart_under_it(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot)
        editor = await open_editor(pilot, app)
        editor.query_one("#flag-max-num-seqs").value = "64"
        await settle(pilot)  # not handed over yet: typing has not paused
        spec = fake.layout.instance("qwen")
        await fake.restart(
            "qwen", spec.with_flags({**spec.flags, "max-num-seqs": 128, "max-model-len": 4096})
        )
        await settle(pilot, 6)
        assert app.screen is editor
        assert editor.query_one("#flag-max-model-len").value == "4096"  # the new flags in the rows
        assert editor.query_one("#flag-max-num-seqs").value == "64"  # the user's own value kept
        assert editor.edited_flags()["max-model-len"] == 4096
        assert "conflict --max-num-seqs: your 64 kept" in screen_text(app)
        await pilot.pause(KEEP_AFTER_S + 0.3)
        assert fake.pending_edits()["qwen"]["max-model-len"] == 4096  # handed over on the new flags
        assert fake.pending_edits()["qwen"]["max-num-seqs"] == 64
        editor.query_one("#flag-max-num-seqs").value = "128"  # the user takes the other's value
        await settle(pilot)
        assert "conflict" not in screen_text(app)
