"""Command palette entries in "noun: verb" form, built from the live store (greyed-out ones omitted)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from vtui.core.state import State


def palette_entries(app) -> list[tuple[str, Callable[[], object], str]]:
    """(title, callback, help) for everything that applies right now."""
    entries: list[tuple[str, Callable[[], object], str]] = []
    for name, view in app.store.views.items():
        state = view.state
        if not state.running:
            entries.append((f"instance: start {name}", partial(app.start_instances, [name]), "launch it"))
        if state.running or state == State.BACKOFF:
            entries.append(
                (f"instance: stop {name}", partial(app.stop_instances, [name]), "stop its process group")
            )
        entries.append((f"instance: restart {name}", partial(app.restart_instance, name), "graceful restart"))
        if view.can_rollback():
            entries.append(
                (
                    f"instance: rollback {name}",
                    partial(app.rollback_instance, name),
                    "restart with the last flags that reached READY",
                )
            )
        entries.append(
            (
                f"instance: details {name}",
                partial(app.open_screen, "detail", name),
                "history, facts, diagnosis",
            )
        )
        entries.append((f"instance: logs {name}", partial(app.open_screen, "logs", name), "follow its log"))
        entries.append(
            (f"instance: edit flags {name}", partial(app.open_screen, "flags", name), "flag editor")
        )
        entries.append(
            (
                f"instance: bench {name}",
                partial(app.open_screen, "bench", name),
                "load-test it (live progress, plot; results kept in the flag history)",
            )
        )
        entries.append(
            (
                f"instance: presets {name}",
                partial(app.open_screen, "presets", name),
                "throughput-first (A) / latency-first (B)",
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
    async def discover(self) -> Hits:
        for title, callback, help_text in palette_entries(self.app):
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, callback, help_text in palette_entries(self.app):
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, text=title, help=help_text)
