"""Quitting the dashboard (`Quitting`): the quit dialog (`q`, ctrl+q, the palette's "app: quit") and what
its answer does: save the layout first, leave the instances running, or stop them. The session
supervisor outlives the dashboard either way; the dashboard exits once its bridge is closed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vtui.ui.app import VtuiApp


class Quitting:
    def __init__(self, app: VtuiApp) -> None:
        self._app = app

    def ask(self) -> None:
        """The quit dialog (not twice: a second `q` while it asks does nothing)."""
        from vtui.ui.screens.dialogs import QuitScreen

        app = self._app
        if isinstance(app.screen, QuitScreen):
            return  # already asking
        app.push_screen(QuitScreen(unsaved=app.store.dirty, edits=app.store.pending), self._answered)

    def _answered(self, answer: str | None) -> None:
        if answer == "save":
            self.save_then_quit()
        elif answer in ("leave", "stop"):
            self.close_and_exit(answer == "stop")

    def save_then_quit(self) -> None:
        """Quit's "save first": save the layout to its file (ask for one when it has none), then quit and
        leave the instances running."""
        app = self._app

        async def save_and_exit(path: Path) -> None:
            if await app.layout_files.write(path).wait():  # not saved: the error is shown, vtui stays
                self.close_and_exit(False)

        def go(path: Path) -> None:
            app.run_worker(save_and_exit(path), group="shutdown", exit_on_error=False)

        if app.store.path is not None:
            go(Path(app.store.path))
        else:
            from vtui.ui.screens.dialogs import PathScreen

            app.push_screen(
                PathScreen("Save layout as, then quit", f"layouts/{app.store.layout.session.name}.toml"),
                lambda text: go(Path(text).expanduser()) if text else None,
            )

    def close_and_exit(self, stop_instances: bool) -> None:
        """Close the bridge (with `stop_instances`: the supervisor stops every instance), then exit."""
        app = self._app

        async def close() -> None:
            try:
                await app.bridge.close(stop_instances=stop_instances)
            finally:
                app.exit(0)

        app.run_worker(close(), group="shutdown", exit_on_error=False)
