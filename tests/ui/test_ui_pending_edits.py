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
