"""Where the App's notifications show (`Notices`): on the screens' reserved notice line, never over the
data, and the one short "why that key did nothing" warning, not repeated while it is still shown."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from vtui.ui.widgets.notices import NoticeLine

if TYPE_CHECKING:
    from textual.notifications import Notification
    from textual.timer import Timer

    from vtui.ui.app import VtuiApp

WHY_NOT_SECONDS = 3.0  # how long a "why nothing happened" notice shows


class Notices:
    def __init__(self, app: VtuiApp) -> None:
        self._app = app
        self._timer: Timer | None = None  # redraws the lines when the next notification expires
        self._why_not_said: tuple[str, float] | None = None  # the last "why nothing happened", and when

    def route(self, live: list[Notification]) -> bool:
        """The App's `route_notifications` (vtui.ui.textual_private: after each `notify`, expiry and
        screen resume): the live notifications go to the notice line of every screen that has one (a
        modal's shows through on the screen below); only a screen stack with none falls back to
        Textual's toasts."""
        app = self._app
        lines = [line for screen in app.screen_stack for line in screen.query(NoticeLine)]
        if not lines:
            return False
        for line in lines:
            line.show(live)
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if live:  # redraw when the next one expires
            next_expiry = max(0.05, min(n.time_left for n in live))
            self._timer = app.set_timer(next_expiry, app.refresh_notifications)
        return True

    def say_why_not(self, reason: str) -> None:
        """Say why a key did nothing: one short warning, not repeated while the same one is still shown
        (a key held down or pressed again)."""
        now = time.monotonic()
        said = self._why_not_said
        if said is not None and said[0] == reason and now - said[1] < WHY_NOT_SECONDS:
            return
        self._why_not_said = (reason, now)
        self._app.notify(reason, severity="warning", timeout=WHY_NOT_SECONDS)
