"""An instance's log: follow, `/` filter, warnings and errors highlighted, jump to the first error.

Bounded twice: the store keeps the last LOG_LINES per instance and the Log widget `max_lines`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.highlighter import Highlighter
from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Footer, Input, Log

from vtui.ui.keymap import LOG_BINDINGS
from vtui.ui.screens.base import StoreScreen
from vtui.ui.store import LOG_LINES, Store
from vtui.ui.widgets.ordered_input import OrderedInput
from vtui.ui.widgets.titlebar import TitleBar

ERROR = re.compile(r"\b(ERROR|CRITICAL|Traceback|\w+Error)\b")
WARNING = re.compile(r"\bWARN(?:ING)?\b")


class LevelHighlighter(Highlighter):
    """Colours whole lines by level: errors red, warnings yellow."""

    def highlight(self, text: Text) -> None:
        plain = text.plain
        if ERROR.search(plain):
            text.stylize("bold red")
        elif WARNING.search(plain):
            text.stylize("yellow")


class LogScreen(StoreScreen):
    BINDINGS = [*LOG_BINDINGS]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.instance = name
        self.pattern: str = ""
        self.follow = True
        self._shown: list[str] = []
        self._error_cursor = -1

    def compose(self) -> ComposeResult:
        yield TitleBar(f"logs {self.instance}")
        log = Log(max_lines=LOG_LINES, highlight=True, id="log")
        log.highlighter = LevelHighlighter()
        yield log
        yield OrderedInput(
            placeholder="filter (regex or text); enter applies, escape clears", id="log-filter"
        )
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.query_one("#log-filter", Input).display = False
        self.query_one(TitleBar).refresh_from(self.app.store)
        self._reload()

    def _matches(self, line: str) -> bool:
        if not self.pattern:
            return True
        try:
            return re.search(self.pattern, line, re.IGNORECASE) is not None
        except re.error:
            return self.pattern.lower() in line.lower()

    def _reload(self) -> None:
        view = self.app.store.views.get(self.instance)
        log = self.query_one(Log)
        log.clear()
        self._shown = [line for line in (view.logs if view else ()) if self._matches(line)]
        log.write_lines(self._shown)
        self._error_cursor = -1
        if self.follow:
            log.scroll_end(animate=False)

    def refresh_view(self, store: Store, names: Iterable[str] | None = None) -> None:
        self.query_one(TitleBar).refresh_from(store)

    def append_logs(self, name: str, lines: Iterable[str]) -> None:
        if name != self.instance:
            return
        new = [line for line in lines if self._matches(line)]
        if new:
            self._shown.extend(new)
            del self._shown[:-LOG_LINES]
            self.query_one(Log).write_lines(new, scroll_end=self.follow)

    def action_back(self) -> None:
        box = self.query_one("#log-filter", Input)
        if box.display:
            box.display = False
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
        self.query_one(Log).focus()
        self._reload()

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        log = self.query_one(Log)
        log.auto_scroll = self.follow
        if self.follow:
            log.scroll_end(animate=False)
        self.notify(f"follow {'on' if self.follow else 'off'}")

    def _errors(self) -> list[int]:
        return [i for i, line in enumerate(self._shown) if ERROR.search(line)]

    def action_first_error(self) -> None:
        self._error_cursor = -1
        self.action_next_error()

    def action_next_error(self) -> None:
        errors = self._errors()
        if not errors:
            self.notify("no errors in this log")
            return
        self._error_cursor = (self._error_cursor + 1) % len(errors)
        self.follow = False
        log = self.query_one(Log)
        log.auto_scroll = False
        log.scroll_to(y=errors[self._error_cursor], animate=False)
