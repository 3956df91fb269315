"""The App's screen stack as readers of the store (`Screens`): each change redrawn on the screens that show
it, new log lines appended, an instance's screens opened, the stack cut back to the dashboard.

It only reads the store: the App's message handlers change it, then call here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from textual.css.query import NoMatches
from textual.dom import NoScreen

from vtui.ui.screens.base import StoreScreen
from vtui.ui.screens.dashboard import DashboardScreen

if TYPE_CHECKING:
    from textual.screen import Screen

    from vtui.ui.app import VtuiApp


class Screens:
    def __init__(self, app: VtuiApp) -> None:
        self._app = app

    def refresh(self, names: Iterable[str] | None) -> None:
        """Redraw every store screen from the store (`names`: the instances whose view changed; None:
        anything may have)."""
        wanted = set(names) if names is not None else None
        for screen in self._app.screen_stack:
            if isinstance(screen, StoreScreen) and screen.is_mounted:
                try:
                    screen.refresh_view(self._app.store, wanted)
                except (NoMatches, NoScreen):  # a screen being torn down while samples still arrive
                    continue

    def append_logs(self, instance: str, lines: tuple[str, ...], skipped: int) -> None:
        """Lines of `instance` just added to the store: the screens that show logs append them."""
        for screen in self._app.screen_stack:
            if isinstance(screen, StoreScreen):
                screen.append_logs(instance, lines, skipped)

    def refresh_gpu(self) -> None:
        """The dashboards' GPU panels, at once (the first sample of a host: the panel's rows appear)."""
        for screen in self._app.screen_stack:
            if isinstance(screen, DashboardScreen):
                screen.refresh_gpu(self._app.store)

    def dashboard(self) -> DashboardScreen:
        return next(s for s in self._app.screen_stack if isinstance(s, DashboardScreen))

    def back_to_dashboard(self) -> None:
        """Close every screen above the dashboard and rebuild it (another layout: another store)."""
        while len(self._app.screen_stack) > 2:
            self._app.pop_screen()
        self.dashboard().rebuild()

    def open(self, kind: str, name: str) -> None:
        """Open instance `name`'s screen of `kind` (detail, logs, flags, presets, bench, tune)."""
        from vtui.ui.screens.bench import BenchScreen
        from vtui.ui.screens.detail import DetailScreen
        from vtui.ui.screens.flags import FlagEditorScreen
        from vtui.ui.screens.logs import LogScreen
        from vtui.ui.screens.presets import PresetScreen
        from vtui.ui.screens.tune import TuneScreen

        cls: type[Screen[None]] = {
            "detail": DetailScreen,
            "logs": LogScreen,
            "flags": FlagEditorScreen,
            "presets": PresetScreen,
            "bench": BenchScreen,
            "tune": TuneScreen,
        }[kind]
        self._app.push_screen(cls(name))
