"""The screens' bases: StoreScreen (repainted from the store) and InstanceScreen (the instance keys of the
dashboard and the detail screen, greyed out where they do not apply; the rules: `vtui.ui.actions`, which
the command palette reads too)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from textual.screen import Screen

from vtui.ui import actions
from vtui.ui.store import InstanceView, Store

if TYPE_CHECKING:
    from textual import getters

    from vtui.ui.app import VtuiApp


class StoreScreen(Screen[None]):
    """A full screen that shows the store: the App calls `refresh_view` after each change (`names`: the
    instances whose view changed; None: anything may have)."""

    if TYPE_CHECKING:
        app = getters.app(VtuiApp)

    def refresh_view(self, store: Store, names: Iterable[str] | None = None) -> None:
        raise NotImplementedError

    def append_logs(self, name: str, lines: Iterable[str], skipped: int = 0) -> None:
        """New log lines of instance `name` (already in the store); the log screen shows them."""


class InstanceScreen(StoreScreen):
    """A screen that has a current instance (`selected_name`) and the instance keys."""

    _binding_key: tuple[object, ...] | None = None

    def selected_name(self) -> str | None:  # pragma: no cover - overridden
        raise NotImplementedError

    def refresh_bindings_if_changed(self) -> None:
        """Re-check the greyed-out actions only when what they depend on changed (a footer refresh
        recomposes it: doing that per metrics sample costs more than everything else together)."""
        view = self._view()
        key = (
            self.selected_name(),
            view.state if view else None,
            view.can_rollback() if view else None,
            len(view.all_problems) if view else 0,
        )
        if key != self._binding_key:
            self._binding_key = key
            self.refresh_bindings()

    def _view(self) -> InstanceView | None:
        name = self.selected_name()
        return self.app.store.views.get(name) if name else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action not in actions.BY_ACTION:
            return True
        view = self._view()
        if view is None:
            return False
        return True if actions.applies(action, view) else None

    def say_why_not(self, action: str) -> None:
        """An instance key pressed where it is greyed out: say why it does nothing (other actions: no)."""
        if action in actions.BY_ACTION:
            self.app.notices.say_why_not(actions.why_not(action, self._view()))

    def _perform(self, action: str) -> None:
        if name := self.selected_name():
            actions.perform(self.app, action, name)

    def action_detail(self) -> None:
        self._perform("detail")

    def action_logs(self) -> None:
        self._perform("logs")

    def action_flags(self) -> None:
        self._perform("flags")

    def action_presets(self) -> None:
        self._perform("presets")

    def action_bench(self) -> None:
        self._perform("bench")

    def action_tune(self) -> None:
        self._perform("tune")

    def action_restart(self) -> None:
        self._perform("restart")

    def action_start(self) -> None:
        self._perform("start")

    def action_stop(self) -> None:
        self._perform("stop")

    def action_rollback(self) -> None:
        self._perform("rollback")

    def action_sleep_toggle(self) -> None:
        self._perform("sleep_toggle")
