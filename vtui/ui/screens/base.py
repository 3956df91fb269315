"""Instance actions shared by the dashboard and the detail screen, greyed out where they do not apply."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vtui.core.state import State
from vtui.ui.store import InstanceView

if TYPE_CHECKING:
    from vtui.ui.app import VtuiApp

INSTANCE_ACTIONS = {"detail", "logs", "flags", "presets", "restart", "start", "stop", "rollback", "bench"}


class InstanceActions:
    """Mixin for a Screen that has a current instance (`selected_name`)."""

    app: VtuiApp

    def selected_name(self) -> str | None:  # pragma: no cover - overridden
        raise NotImplementedError

    _binding_key: tuple | None = None

    def refresh_bindings_if_changed(self) -> None:
        """Re-check the greyed-out actions only when what they depend on changed (a footer refresh
        recomposes it: doing that per metrics sample costs more than everything else together)."""
        view = self._view()
        key = (
            self.selected_name(),
            view.state if view else None,
            view.can_rollback() if view else None,
            len(view.problems) if view else 0,
        )
        if key != self._binding_key:
            self._binding_key = key
            self.refresh_bindings()

    def _view(self) -> InstanceView | None:
        name = self.selected_name()
        return self.app.store.views.get(name) if name else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action not in INSTANCE_ACTIONS:
            return True
        view = self._view()
        if view is None:
            return False
        state = view.state
        if action == "start":
            return True if not state.running else None
        if action == "stop":
            return True if state.running or state == State.BACKOFF else None
        if action == "restart":
            return True if state != State.STOPPING else None
        if action == "rollback":
            return True if view.can_rollback() else None
        if action == "bench":
            return True if state == State.READY else None
        return True

    def action_detail(self) -> None:
        from vtui.ui.screens.detail import DetailScreen

        if name := self.selected_name():
            self.app.push_screen(DetailScreen(name))

    def action_logs(self) -> None:
        from vtui.ui.screens.logs import LogScreen

        if name := self.selected_name():
            self.app.push_screen(LogScreen(name))

    def action_flags(self) -> None:
        from vtui.ui.screens.flags import FlagEditorScreen

        if name := self.selected_name():
            self.app.push_screen(FlagEditorScreen(name))

    def action_presets(self) -> None:
        from vtui.ui.screens.presets import PresetScreen

        if name := self.selected_name():
            self.app.push_screen(PresetScreen(name))

    def action_bench(self) -> None:
        from vtui.ui.screens.bench import BenchScreen

        if name := self.selected_name():
            self.app.push_screen(BenchScreen(name))

    def action_restart(self) -> None:
        if name := self.selected_name():
            self.app.restart_instance(name)

    def action_start(self) -> None:
        if name := self.selected_name():
            self.app.start_instances([name])

    def action_stop(self) -> None:
        if name := self.selected_name():
            self.app.stop_instances([name])

    def action_rollback(self) -> None:
        if name := self.selected_name():
            self.app.rollback_instance(name)
