"""Command palette entries in "noun: verb" form, built from the live store (greyed-out ones omitted)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from vtui.ui import actions

if TYPE_CHECKING:
    from vtui.ui.app import VtuiApp


def palette_entries(app: VtuiApp) -> list[tuple[str, Callable[[], object], str]]:
    """(title, callback, help) for everything that applies right now (the instance rules: actions.py)."""
    entries: list[tuple[str, Callable[[], object], str]] = []
    for name, view in app.store.views.items():
        for entry in actions.INSTANCE_ACTIONS:
            if entry.applies(view):
                entries.append(
                    (
                        f"instance: {entry.verb} {name}",
                        partial(actions.perform, app, entry.action, name),
                        entry.help,
                    )
                )
    entries += [
        ("layout: save", app.action_save_layout, "save the running session's layout"),
        ("layout: save as...", app.action_save_layout_as, "save to another path"),
        ("layout: open...", app.action_open_layout, "switch to another layout"),
        ("app: help", app.action_help, "keys"),
        ("app: quit", app.action_quit_dialog, "stop instances or leave them running"),
    ]
    return entries


class VtuiCommands(Provider):
    def _entries(self) -> list[tuple[str, Callable[[], object], str]]:
        return palette_entries(cast("VtuiApp", self.app))

    async def discover(self) -> Hits:
        for title, callback, help_text in self._entries():
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, callback, help_text in self._entries():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, text=title, help=help_text)
