"""The notice line: one reserved row above the footer where vtui's notifications show, so they never
cover data (Textual's toasts are drawn over the bottom-right of the screen: the GPU panel, the fleet
rows). The App routes every notification here (`vtui.ui.notices.Notices`): the most severe live
one, newest first among equals, with its severity as a word as well as a colour, and how many more are
live. With none it shows the screen's hint (the dashboard's: the `:` command line)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.notifications import Notification
from textual.widgets import Static

from vtui.ui.widgets.palette import palette_of

RANK = {"error": 0, "warning": 1, "information": 2}


def notice_text(live: Iterable[Notification], hint: str = "", app: object = None) -> Text:
    notices = sorted(live, key=lambda n: (RANK.get(n.severity, 2), -n.raised_at))
    pal = palette_of(app)
    if not notices:
        return Text(hint, style=pal.muted)
    top = notices[0]
    out = Text()
    if top.severity == "error":
        out.append("error: ", style=pal.bad + pal.bold)
    elif top.severity == "warning":
        out.append("warning: ", style=pal.warn + pal.bold)
    if top.title:
        out.append(f"{top.title}: ", style=pal.bold)
    out.append(" ".join(top.message.split()))  # one line: newlines would push the rest off the row
    if len(notices) > 1:
        out.append(f"  (+{len(notices) - 1} more)", style=pal.muted)
    return out


class NoticeLine(Static):
    """The reserved row (docked above the footer); `hint` shows when no notification is live."""

    DEFAULT_CSS = """
    NoticeLine { dock: bottom; height: 1; margin-bottom: 1; padding: 0 1; background: $surface; }
    """

    def __init__(self, hint: str = "") -> None:
        super().__init__(classes="notice-line")
        self.hint = hint
        self._last: Text | None = None

    def on_mount(self) -> None:
        self.show(())

    def show(self, live: Iterable[Notification]) -> None:
        text = notice_text(live, self.hint, self.app)
        text.truncate(max(1, self.size.width - 2) if self.size.width else 200, overflow="ellipsis")
        if text != self._last:
            self._last = text
            self.update(text)

    @property
    def plain(self) -> str:
        return self._last.plain if self._last is not None else ""
