"""An instance's log: follows forever, `/` filter, vtui's own probes hidden, errors highlighted.

Following: the view shows the store's ring (the last LOG_LINES lines) and repaints on every coalesced
batch (vtui.ui.logfeed). Scrolling up pauses it (like `less +F`): the view keeps what it showed and counts
the lines that arrive meanwhile; scrolling to the top of a paused view reads older lines from the log
file's end on demand (the file path is in the instance status), in a worker. `F`/`end` follows again and
drops what was read from the file, so memory returns to the ring's size.

Why not Textual's `Log` widget: once it holds `max_lines` lines it prunes before repainting the rows it
just refreshed (their indices lie past the new end) and the scroll offset stays where it was, so nothing
repaints again: the view froze at the 5000th line. `LogView` repaints on every change.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.events import MouseScrollUp
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input

from vtui.core.api import LogScrollback
from vtui.ui.keymap import LOG_BINDINGS
from vtui.ui.screens.base import StoreScreen
from vtui.ui.store import LOG_LINES, Store, is_marker, skipped_marker
from vtui.ui.widgets.footer import LeanFooter
from vtui.ui.widgets.notices import NoticeLine
from vtui.ui.widgets.ordered_input import OrderedInput
from vtui.ui.widgets.scrollbars import whole_cell_scrollbars
from vtui.ui.widgets.titlebar import TitleBar

ERROR = re.compile(r"\b(ERROR|CRITICAL|Traceback|\w+Error)\b")
WARNING = re.compile(r"\bWARN(?:ING)?\b")
# vtui's own probes in vLLM's access log: the scraper's GET /metrics, the health check's GET /health
PROBE = re.compile(r'"(?:GET|HEAD) /(?:metrics|health)/? HTTP/[\d.]+"')
SCROLLBACK_CHUNK = 2000  # lines read from the file per step back
SCROLLBACK_MAX = 50_000  # lines a paused view holds at most (the oldest read are kept)
ANCHOR = 5  # lines matched to find where the view's first line is in the file


def is_probe(line: str) -> bool:
    return ("/metrics" in line or "/health" in line) and PROBE.search(line) is not None


_CONTROL = re.compile("[\u0000-\u0008\u000b-\u001f\u007f]").sub  # never reach the terminal
_REPLACEMENT = "\ufffd"
_STYLES = {name: Style.parse(name) for name in ("bold magenta", "bold red", "yellow")}


def level_style(line: str) -> str:
    if is_marker(line):
        return "bold magenta"
    if ERROR.search(line):
        return "bold red"
    if WARNING.search(line):
        return "yellow"
    return ""


def _anchor_of(lines: list[str]) -> list[str]:
    """The first consecutive file lines of `lines` (up to a skipped marker), to find them in the file."""
    out: list[str] = []
    for line in lines:
        if is_marker(line):
            if out:
                break
            continue
        out.append(line)
        if len(out) >= ANCHOR:
            break
    return out


class LogView(ScrollView, can_focus=True):
    """A bounded list of lines drawn row by row (only the visible rows cost anything)."""

    DEFAULT_CSS = "LogView { background: $surface; overflow-y: scroll; overflow-x: auto; }"

    def __init__(self, capacity: int, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.lines: deque[str] = deque(maxlen=capacity)
        self.follow = True
        self._base: Style | None = None
        self._styled: dict[str, Style] = {}
        self._width = 0
        self.on_top: Callable[[], None] | None = (
            None  # called when a paused view is scrolled to its first line
        )
        self.on_user_scroll: Callable[[], None] | None = (
            None  # called when the user scrolls up while following
        )
        self.on_end: Callable[[], None] | None = None  # called on `end` in a paused view

    def set_lines(self, lines: Iterable[str], capacity: int | None = None) -> None:
        cap = capacity or self.lines.maxlen
        self.lines = deque(lines, maxlen=cap)
        self._width = max(map(len, self.lines), default=0)
        self._changed()

    def append(self, lines: list[str]) -> None:
        self.lines.extend(lines)
        if lines:
            self._width = max(self._width, max(map(len, lines)))
        self._changed()

    def prepend(self, lines: list[str], capacity: int) -> None:
        """Older lines above the first (a paused view, up to `capacity` lines); the rows shown stay."""
        if self.lines.maxlen != capacity:
            self.lines = deque(self.lines, maxlen=capacity)
        room = capacity - len(self.lines)
        lines = lines[-room:] if room > 0 else []
        if not lines:
            return
        dropped = 0  # a "N lines skipped" marker on top stood for lines the file now gives back
        while self.lines and is_marker(self.lines[0]):
            self.lines.popleft()
            dropped += 1
        self.lines.extendleft(reversed(lines))
        self._width = max(self._width, max(map(len, lines)))
        self._set_virtual_size(Size(self._width, len(self.lines)))
        self.scroll_to(y=self.scroll_y + len(lines) - dropped, animate=False, immediate=True)
        self.refresh()

    def _set_virtual_size(self, size: Size) -> None:
        """A new line count or width without a layout pass of the whole screen, unless a scrollbar comes
        or goes (assigning Textual's `virtual_size` lays the screen out again on every change: a key
        that refilters the view redrew the title, footer and status with it)."""
        old = self.virtual_size
        if size == old:
            return
        width, height = self.container_size
        update = getattr(self, "_scroll_update", None)  # Textual's own, what a resize calls
        same_bars = (size.width > width) == (old.width > width) and (size.height > height) == (
            old.height > height
        )
        if update is None or not same_bars or not old.width or not old.height:
            self.virtual_size = size
            return
        self.set_reactive(ScrollView.virtual_size, size)
        update(size)
        self.refresh()

    def _changed(self) -> None:
        self._set_virtual_size(Size(self._width, len(self.lines)))
        if self.follow:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
        self.refresh()  # the rows move even when the scroll offset cannot (a full ring)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self._base
        if base is None:
            base = self._base = self.rich_style  # computing it costs more than drawing the row
            self._styled = {name: base + style for name, style in _STYLES.items()}
        if index >= len(self.lines):
            return Strip.blank(width, base)
        line = self.lines[index]
        level = level_style(line)
        style = self._styled[level] if level else base
        # One Strip per row, no Text: following a flood repaints every row on every batch, and each Strip
        # Textual makes costs seven caches (allocation and GC work on the UI thread).
        if line.isascii() and line.isprintable():  # the usual vLLM line: one cell per character
            text = line[scroll_x : scroll_x + width]
            pad = width - len(text)
            segments = [Segment(text, style), Segment(" " * pad, base)] if pad else [Segment(text, style)]
            return Strip(segments, width)
        line = _CONTROL(_REPLACEMENT, line.expandtabs())
        strip = Strip([Segment(line, style)], cell_len(line))
        return strip.crop_extend(scroll_x, scroll_x + width, base)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base = None

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if not self.follow and new <= 0 and self.on_top is not None:
            self.on_top()

    def _user_scrolled(self) -> None:
        if self.follow and self.on_user_scroll is not None:
            self.on_user_scroll()

    def action_scroll_up(self) -> None:
        self._user_scrolled()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self._user_scrolled()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self._user_scrolled()
        super().action_scroll_home()

    def action_scroll_end(self) -> None:
        if not self.follow and self.on_end is not None:
            self.on_end()  # end: follow again
        else:
            super().action_scroll_end()

    def on_mouse_scroll_up(self, event: MouseScrollUp) -> None:
        self._user_scrolled()  # then the Widget's own handler scrolls


class StatusLine(Widget):
    """One line of text repainted without a layout pass (it changes on every batch: the hidden count)."""

    DEFAULT_CSS = "StatusLine { height: 1; width: 1fr; color: $text-muted; }"

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.text = ""

    def set(self, text: str) -> None:
        if text != self.text:
            self.text = text
            self.refresh()

    def render(self) -> Text:
        return Text(self.text, no_wrap=True, overflow="ellipsis")


class LogScreen(StoreScreen):
    BINDINGS = [*LOG_BINDINGS]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.instance = name
        self.pattern: str = ""
        self.follow = True
        self.show_probes = False
        self.hidden = 0  # probe lines hidden since the view was (re)loaded
        self.new_while_paused = 0
        self._error_cursor = -1
        self._loading = False
        self._file_exhausted = False
        self._anchor: list[str] = []  # the first lines (unfiltered) of what the view holds
        self._view: LogView | None = None  # (set on mount: every batch reaches them, no query each time)
        self._status: StatusLine | None = None
        self._matcher_for: str | None = None
        self._matcher_fn: Callable[[str], bool] = bool

    # -- the lines -------------------------------------------------------------------------------
    @property
    def _shown(self) -> list[str]:
        """The lines the view holds now (tests and error jumps read it)."""
        return list(self.query_one(LogView).lines)

    def compose(self) -> ComposeResult:
        yield TitleBar(f"logs {self.instance}")
        yield StatusLine(id="log-status")
        yield LogView(LOG_LINES, id="log")
        yield OrderedInput(
            placeholder="filter (regex or text); enter applies, escape clears", id="log-filter"
        )
        yield NoticeLine()
        yield LeanFooter(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.query_one("#log-filter", Input).display = False
        self.query_one(TitleBar).refresh_from(self.app.store)
        view = self._view = self.query_one(LogView)
        whole_cell_scrollbars(view)
        self._status = self.query_one(StatusLine)
        view.on_top = self._scrolled_to_top
        view.on_user_scroll = self._pause
        view.on_end = self._resume
        self._reload()
        view.focus()

    @property
    def _matcher(self) -> Callable[[str], bool]:
        """The filter as one callable, compiled once per pattern (a batch of thousands calls it per line)."""
        if self._matcher_for != self.pattern:
            self._matcher_for = self.pattern
            try:
                search = re.compile(self.pattern, re.IGNORECASE).search
                self._matcher_fn = lambda line: search(line) is not None
            except re.error:
                needle = self.pattern.lower()
                self._matcher_fn = lambda line: needle in line.lower()
        return self._matcher_fn

    def _keep(self, lines: Iterable[str]) -> list[str]:
        """What the view shows of `lines`: vtui's probes out (counted) unless shown, then the filter."""
        out = lines if isinstance(lines, list | tuple) else list(lines)
        if not self.show_probes:
            kept = [line for line in out if not is_probe(line)]
            self.hidden += len(out) - len(kept)
            out = kept
        if self.pattern:
            matches = self._matcher
            out = [line for line in out if matches(line)]
        return list(out)

    def _reload(self) -> None:
        """Back to the store's ring (following, or the snapshot a paused view starts from)."""
        store_view = self.app.store.views.get(self.instance)
        self.hidden = 0
        self.new_while_paused = 0
        self._file_exhausted = False
        log = self.query_one(LogView)
        log.follow = self.follow
        ring = list(store_view.logs) if store_view else []
        self._anchor = _anchor_of(ring)
        log.set_lines(self._keep(ring), LOG_LINES)
        self._error_cursor = -1
        self._update_status()

    def refresh_view(self, store: Store, names: Iterable[str] | None = None) -> None:
        self.query_one(TitleBar).refresh_from(store)

    def append_logs(self, name: str, lines: Iterable[str], skipped: int = 0) -> None:
        view = self._view
        if name != self.instance or view is None or not view.is_mounted:
            return  # (not mounted yet: on_mount reads the store's ring, these lines included; or torn down)
        batch = [skipped_marker(skipped), *lines] if skipped else list(lines)
        if not self.follow:
            self.new_while_paused += len(batch)
            self._update_status()
            return
        new = self._keep(batch)
        if new:
            view.append(new)
        self._update_status()

    def _update_status(self) -> None:
        parts = ["following" if self.follow else f"paused, {self.new_while_paused} new lines: F follows"]
        if self.show_probes:
            parts.append("probes shown (P hides)")
        elif self.hidden:
            parts.append(f"{self.hidden} probe lines hidden (P shows)")
        if self.pattern:
            parts.append(f"filter /{self.pattern}/")
        if self._loading:
            parts.append("reading older lines...")
        if self._status is not None:
            self._status.set("  " + " | ".join(parts))

    # -- following and scrolling back ---------------------------------------------------------------
    def _pause(self) -> None:
        """Stop following: the view holds the ring as it is now (what scrolling back starts from)."""
        if not self.follow:
            return
        log = self.query_one(LogView)
        from_bottom = len(log.lines) - log.scroll_y
        self.follow = False
        self._reload()
        log.scroll_to(y=max(0, len(log.lines) - from_bottom), animate=False, immediate=True)

    def _resume(self) -> None:
        self.follow = True
        self._reload()  # drops what was read from the file: memory back to the ring

    def action_toggle_follow(self) -> None:
        if self.follow:
            self._pause()
        else:
            self._resume()

    def action_follow(self) -> None:
        self._resume()

    def action_toggle_probes(self) -> None:
        self.show_probes = not self.show_probes
        self._reload()

    def _scrolled_to_top(self) -> None:
        if self._loading or self._file_exhausted or not self._anchor:
            return
        store_view = self.app.store.views.get(self.instance)
        status = store_view.status if store_view else None
        kept = status is not None and (status.log_path is not None or bool(status.host))  # a file somewhere
        if not kept or not isinstance(self.app.supervisor, LogScrollback):
            return
        self._loading = True
        self._update_status()
        self._read_older(list(self._anchor))

    @work(exclusive=True, group="log-scrollback", exit_on_error=False)
    async def _read_older(self, anchor: list[str]) -> None:
        """From the log file, read by the supervisor that keeps it (this machine's, or another host's)."""
        supervisor = self.app.supervisor
        try:
            older = (
                await supervisor.older_lines(self.instance, anchor, SCROLLBACK_CHUNK)
                if isinstance(supervisor, LogScrollback)
                else None
            )
        except OSError as exc:
            self.notify(f"could not read {self.instance}'s log: {exc}", severity="warning")
            older = None
        self._loading = False
        if self.follow or not self.is_mounted:
            return
        if older:
            self._anchor = _anchor_of(older)
            log = self.query_one(LogView)
            log.prepend(self._keep(older), SCROLLBACK_MAX)
            if len(older) < SCROLLBACK_CHUNK or len(log.lines) >= SCROLLBACK_MAX:
                self._file_exhausted = True
        else:
            self._file_exhausted = True
        self._update_status()

    # -- filter and errors ------------------------------------------------------------------------
    def action_back(self) -> None:
        box = self.query_one("#log-filter", Input)
        if box.display:
            box.display = False
            self.query_one(LogView).focus()
            return
        self.app.pop_screen()

    def action_filter(self) -> None:
        box = self.query_one("#log-filter", Input)
        box.display = True
        box.value = self.pattern
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.pattern = event.value.strip()
        event.input.display = False
        self.query_one(LogView).focus()
        self.follow = True  # a new filter reads the ring again and follows it
        self._reload()

    def _errors(self) -> list[int]:
        return [i for i, line in enumerate(self.query_one(LogView).lines) if ERROR.search(line)]

    def action_first_error(self) -> None:
        self._error_cursor = -1
        self.action_next_error()

    def action_next_error(self) -> None:
        errors = self._errors()
        if not errors:
            self.notify("no errors in this log")
            return
        self._error_cursor = (self._error_cursor + 1) % len(errors)
        self._pause()
        log = self.query_one(LogView)
        log.scroll_to(y=errors[self._error_cursor], animate=False, immediate=True)
