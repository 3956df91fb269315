"""One rule set for what applies (keys and palette), one registry of binding ids (keymap and help)."""

from __future__ import annotations

import pytest

from vtui.core.state import State
from vtui.ui.actions import INSTANCE_ACTIONS, why_not
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
                if key is not True:  # pressed anyway, it says why in one short line
                    reason = why_not(entry.action, app.store.views["qwen"])
                    assert "qwen" in reason and "\n" not in reason and len(reason) <= 80, reason


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


def _declared_bindings():
    """Every Binding declared in a class body anywhere under vtui.ui (App, screens, widgets)."""
    import importlib
    import pkgutil

    from textual.binding import Binding
    from textual.dom import DOMNode

    import vtui.ui

    found = []
    for info in pkgutil.walk_packages(vtui.ui.__path__, "vtui.ui."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, DOMNode) and obj.__module__ == info.name:
                for b in obj.__dict__.get("BINDINGS", []):
                    found.append((obj.__name__, b))
    assert all(isinstance(b, Binding) for _, b in found)
    return found


def test_every_declared_binding_has_an_id_the_keymap_loader_accepts(tmp_path):
    from vtui.ui.keymap import all_binding_ids, load_user_keymap

    declared = _declared_bindings()
    assert len({cls for cls, _ in declared}) >= 12  # app, dashboard, detail, logs, flags, bench, dialogs...
    assert [f"{cls}:{b.key}" for cls, b in declared if not b.id] == []
    ids = {b.id for _, b in declared}
    assert ids <= all_binding_ids()
    keys = tmp_path / "keys.toml"
    keys.write_text("[keys]\n" + "".join(f'"{i}" = "f{n % 12 + 1}"\n' for n, i in enumerate(sorted(ids))))
    keymap, problems = load_user_keymap(keys)
    assert problems == [] and set(keymap) == ids


async def test_help_lists_every_binding_and_dialog_keys_remap(fake, app_factory, tmp_path):
    from vtui.ui.keymap import all_binding_ids
    from vtui.ui.screens.dialogs import QuitScreen
    from vtui.ui.screens.help import HelpScreen, help_text

    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"help.close" = "c"\n"quit.cancel" = "z"\n')
    app = app_factory(fake, keymap_path=keys)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        assert app.keymap_problems == []
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        shown = help_text(app.screen.rows, app.screen.others).plain
        assert [i for i in sorted(all_binding_ids()) if i not in shown] == []
        quit_rows = dict(app.screen.others)["quit"]
        assert ("z", "Cancel", "quit.cancel", True) in quit_rows
        await pilot.press("c")  # the remapped close key
        await settle(pilot)
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("q")
        await settle(pilot)
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("z")  # the remapped cancel key of a modal dialog
        await settle(pilot)
        assert not isinstance(app.screen, QuitScreen)
