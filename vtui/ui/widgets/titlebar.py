"""The one-line title: session, a failed supervisor, layout path with the unsaved-changes marker, instance
counts."""

from __future__ import annotations

from collections import Counter

from rich.text import Text
from textual.widgets import Static

from vtui.ui import fmt
from vtui.ui.store import InstanceView, Store


def state_word(store: Store, view: InstanceView) -> str:
    """What the title counts a row as: its state, or `host lost` while its host's link is down (the
    state is only the last one known then, as its row says)."""
    link = store.host_of(view) if store.hosts else None
    if link is not None and not link.connected:
        return "host lost"
    return view.state.name.lower()


def title_text(store: Store, screen_title: str = "") -> Text:
    layout = store.layout
    out = Text(" vtui ", style="bold reverse")
    out.append(f" {layout.session.name}", style="bold")
    if store.supervisor_error:
        out.append("  SUPERVISOR FAILED", style="bold white on red")
    out.append(f"  {fmt.path(store.path) if store.path else '(no file yet)'}", style="dim")
    if store.unsaved:
        out.append(" [+] unsaved", style="bold yellow")
        if store.pending:  # flag edits not applied yet (the session supervisor keeps them)
            out.append(f" edits: {', '.join(sorted(store.pending))}", style="yellow")
    counts = Counter(state_word(store, v) for v in store.views.values())
    if counts:
        known = "  last known: " if store.supervisor_error else "  "  # no longer watched
        out.append(known + " ".join(f"{n} {s}" for s, n in sorted(counts.items())), style="cyan")
    if screen_title:
        out.append(f"  | {screen_title}", style="bold")
    return out


NARROW = 110  # below this width the footer cannot show every key: the title says how to list them


class TitleBar(Static):
    """The title; on a narrow terminal it ends with the help key (the footer is cut before it).
    `help_hint=False` where typing goes to an input and the key would not reach help."""

    def __init__(self, screen_title: str = "", help_hint: bool = True) -> None:
        super().__init__(classes="titlebar")
        self.screen_title = screen_title
        self.help_hint = help_hint
        self._hint = ""
        self._store: Store | None = None
        self._last: Text | None = None
        self._key: tuple | None = None

    def refresh_from(self, store: Store) -> None:
        self._store = store
        key = (  # what title_text reads: the text is built only when one of these changed
            store.layout.session.name,
            store.supervisor_error,
            store.path,
            store.dirty,
            tuple(sorted(store.pending)),
            tuple(v.state for v in store.views.values()),
            tuple(h.connected for h in store.hosts.values()),
            self.screen_title,
            self._hint,
        )
        if key == self._key:
            return
        self._key = key
        text = title_text(store, self.screen_title)
        if self._hint:
            text.append(self._hint, style="dim")
        if text != self._last:
            self._last = text
            self.update(text)

    def on_resize(self) -> None:
        hint = self._help_key() if self.help_hint and self.size.width < NARROW else ""
        if hint != self._hint:
            self._hint = hint
            if self._store is not None:
                self.refresh_from(self._store)

    def _help_key(self) -> str:
        for active in self.screen.active_bindings.values():
            if active.binding.action in ("help", "app.help"):
                return f"  {self.app.get_key_display(active.binding)} keys"
        return ""
