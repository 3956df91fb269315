"""An Input whose keys act in the order they were typed, even when they arrive in one burst.

Textual hands a printable key straight to the focused Input but sends a bound key (ctrl+u, end, tab…)
on a longer way, bubbling up to the app, which then runs the binding: when a paste, a fast typist or
`tmux send-keys` delivers `ctrl+u 6 4` at once, the 6 and 4 are typed first and then cleared. Here the
Input runs the binding its key resolves to (its own, its screen's or the app's, as the app would) when
the key reaches it, so each key acts after the ones before it; a key that finds the focus already moved
on (a tab, a dialog opened by an earlier key of the burst) is passed to the widget that has it now.
Priority bindings are still run by the app on arrival; a screen action that reads the inputs waits for
them with `after_typing`."""

from __future__ import annotations

from collections.abc import Callable

from textual import events
from textual.dom import NoScreen
from textual.screen import Screen
from textual.widgets import Input


class OrderedInput(Input):
    async def on_key(self, event: events.Key) -> None:
        """Runs before Input's own key handler (a subclass's handler comes first); `prevent_default`
        keeps Input from handling a key that was passed on or ran a binding here."""
        try:
            screen = self.screen
        except NoScreen:  # an earlier key of the burst closed this input's dialog
            screen = None
        # ... or moved the focus (tab…), or opened a dialog over it (ctrl+r's diff): the key goes there
        if screen is None or screen is not self.app.screen or screen.focused is not self:
            event.stop()
            event.prevent_default()
            key_order = getattr(self.app, "key_order", None)  # VtuiApp's: after the move is done
            if key_order is not None:
                key_order.again(event.key, event.character)
            else:
                (self.app.focused or self.app.screen).post_message(events.Key(event.key, event.character))
            return
        if not event.is_printable:
            active = screen.active_bindings.get(event.key)
            if active is not None and active.enabled and not active.binding.priority:
                event.stop()
                event.prevent_default()
                await self.app.run_action(active.binding.action, active.node)


def after_typing(screen: Screen, callback: Callable[[], object]) -> None:
    """Run `callback` once the focused Input has handled the keys already sent to it (a priority
    binding such as ctrl+r is run by the app before the characters typed just ahead of it)."""
    focused = screen.focused
    if isinstance(focused, Input):
        focused.call_later(callback)
    else:
        callback()
