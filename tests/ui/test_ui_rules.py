"""One rule set for what applies (keys and palette), one registry of binding ids (keymap and help)."""

from __future__ import annotations

import pytest

from vtui.core.state import State
from vtui.ui.actions import INSTANCE_ACTIONS
from vtui.ui.commands import palette_entries


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


@pytest.mark.parametrize("rollback", [False, True], ids=["no-good-flags", "good-flags-differ"])
async def test_palette_offers_exactly_what_the_keys_allow_in_every_state(fake, app_factory, layout, rollback):
    app = app_factory(fake, autostart=False)
    good = layout.instance("qwen").with_flags({"max-num-seqs": 8}) if rollback else None
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        dash = app.screen
        assert dash.selected_name() == "qwen"
        for state in State:
            fake.set_state("qwen", state, last_good_spec=good)
            await settle(pilot)
            assert app.store.views["qwen"].state == state
            offered = {t for t, _, _ in palette_entries(app)}
            for entry in INSTANCE_ACTIONS:
                key = dash.check_action(entry.action, ())
                in_palette = f"instance: {entry.verb} qwen" in offered
                assert in_palette == (key is True), (state, entry.action, key, in_palette)


async def test_stopped_instance_offers_no_bench_and_stopping_no_restart(fake, app_factory):
    app = app_factory(fake, autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        titles = {t for t, _, _ in palette_entries(app)}
        assert "instance: bench qwen" not in titles and "instance: start qwen" in titles
        fake.set_state("qwen", State.STOPPING)
        await settle(pilot)
        titles = {t for t, _, _ in palette_entries(app)}
        assert "instance: restart qwen" not in titles and app.screen.check_action("restart", ()) is None
