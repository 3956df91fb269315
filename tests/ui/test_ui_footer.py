"""The footer recomposes once per change of the keys it shows, not once per `refresh_bindings` (a
recompose remounts every key: several per frame at the dashboard's start cost its first frame)."""

from __future__ import annotations

from textual.widgets._footer import FooterKey

from vtui.ui.widgets.footer import LeanFooter


async def settle(pilot, n: int = 4) -> None:
    for _ in range(n):
        await pilot.pause()


def _keys(footer: LeanFooter) -> list[tuple[str, str, bool]]:
    return [(k.key_display, k.description, k.has_class("-disabled")) for k in footer.query(FooterKey)]


async def test_refreshes_that_change_nothing_do_not_recompose(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        footer = app.screen.query_one(LeanFooter)
        shown = _keys(footer)
        assert ("q", "Quit", False) in shown and ("l", "Logs", False) in shown
        recomposed = []
        original = footer.recompose

        async def counting():
            recomposed.append(1)
            await original()

        footer.recompose = counting  # type: ignore[method-assign]
        for _ in range(3):
            app.screen.refresh_bindings()
        await settle(pilot)
        assert recomposed == [] and _keys(footer) == shown

        app.set_keymap({"instance.logs": "L"})  # what a key shows changed: once, whatever the calls
        app.screen.refresh_bindings()
        app.screen.refresh_bindings()
        await settle(pilot)
        assert recomposed == [1]
        assert ("L", "Logs", False) in _keys(footer) and ("l", "Logs", False) not in _keys(footer)


async def test_a_key_greyed_out_by_state_shows_greyed(fake, app_factory):
    """The screen's check_action drives the enabled state; the footer follows it (one recompose)."""
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        footer = app.screen.query_one(LeanFooter)
        before = {(d, t): off for d, t, off in _keys(footer)}
        app.screen.check_action = lambda action, parameters: None if action == "logs" else True  # type: ignore[method-assign]
        app.screen.refresh_bindings()
        await settle(pilot)
        after = {(d, t): off for d, t, off in _keys(footer)}
        assert before[("l", "Logs")] is False and after[("l", "Logs")] is True
