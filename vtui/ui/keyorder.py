"""Keys act one after another (`KeyOrder`): a key waits until the one before it has been handled and the
screen refreshed, so a key typed right after one that opens or closes a screen reaches the screen now
shown (its focused input), not the one going or a screen not yet mounted. The App hands it every key it
gets (`on_event`); vtui.ui.widgets.ordered_input hands back a key that reached a widget too late."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial

from textual import events
from textual.app import App, ScreenStackError
from textual.message_pump import MessagePump

KEY_HOLD_MAX = 0.25  # seconds a key waits at most for the one before it to play out (a refresh)
KEY_HOLD_TRIES = 8  # refreshes a key waits at most for a screen being pushed to be mounted


class KeyOrder:
    def __init__(self, app: App[int], dispatch: Callable[[events.Key], Awaitable[None]]) -> None:
        """`dispatch`: how the App handles a key let through (Textual's own `on_event`)."""
        self._app = app
        self._dispatch = dispatch
        # keys of one burst, held while an earlier one's effects (a screen pushed or popped) play out
        self._held: deque[events.Key] = deque()
        self._turn = 0  # bumped per key let through; a stale "next key" call does nothing
        self._busy = False

    async def take(self, event: events.Key) -> None:
        """A key as it arrives: handled now, or held until the keys before it have played out."""
        if self._busy or self._held:
            self._held.append(event)
            return
        await self._let_through(event)

    def again(self, key: str, character: str | None) -> None:
        """A key that reached a widget no longer focused or shown (an earlier key of the burst moved
        on): it goes again, to what has the focus once that move is done, before the keys after it."""
        self._held.appendleft(events.Key(key, character))
        if not self._busy:
            self._busy = True
            self._wait_for_effects()

    async def _let_through(self, event: events.Key) -> None:
        self._busy = True
        target = self._app.focused or self._app.screen  # where the key went: its queue holds it now
        await self._dispatch(event)
        self._wait_for_effects(target=target)

    def _wait_for_effects(self, tries: int = 0, target: MessagePump | None = None) -> None:
        """Let the next held key through once `target` (the widget the key went to) has handled it and
        the screen has refreshed after that (or KEY_HOLD_MAX, a refresh that never comes)."""
        app = self._app
        self._turn += 1
        turn = self._turn
        if target is not None:  # first the target's queue (the key), then a refresh (what it posted)
            target.call_later(app.call_after_refresh, self._next, turn, tries)
        else:
            app.call_after_refresh(self._next, turn, tries)
        app.set_timer(KEY_HOLD_MAX, partial(self._next, turn, tries))

    async def _next(self, turn: int, tries: int) -> None:
        if turn != self._turn or not self._busy:
            return  # already moved on (the refresh or the timer came first)
        try:
            mounted = self._app.screen.is_mounted
        except ScreenStackError:
            mounted = True
        if not mounted and tries < KEY_HOLD_TRIES:  # a screen being pushed: its focus is not set yet
            self._wait_for_effects(tries + 1)
            return
        self._busy = False
        if self._held:
            await self._let_through(self._held.popleft())
