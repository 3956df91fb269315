"""The one-line title: session, layout path with the unsaved-changes marker, instance counts."""

from __future__ import annotations

from collections import Counter

from rich.text import Text
from textual.widgets import Static

from vtui.ui.store import Store


def title_text(store: Store, screen_title: str = "") -> Text:
    layout = store.layout
    out = Text(" vtui ", style="bold reverse")
    out.append(f" {layout.session.name}", style="bold")
    out.append(f"  {store.path or '(no file yet)'}", style="dim")
    if store.dirty:
        out.append(" [+] unsaved", style="bold yellow")
    counts = Counter(v.state.name.lower() for v in store.views.values())
    if counts:
        out.append("  " + " ".join(f"{n} {s}" for s, n in sorted(counts.items())), style="cyan")
    if screen_title:
        out.append(f"  | {screen_title}", style="bold")
    return out


class TitleBar(Static):
    def __init__(self, screen_title: str = "") -> None:
        super().__init__(classes="titlebar")
        self.screen_title = screen_title

    def refresh_from(self, store: Store) -> None:
        text = title_text(store, self.screen_title)
        if text != getattr(self, "_last", None):
            self._last = text
            self.update(text)
