"""The running layout and its files (`LayoutFiles`): save (in place, merged with what is on disk), save as,
open another; the file I/O runs in workers of the "layout" group, which post LayoutSaved / LayoutOpened
for the App's handlers. Errors become notifications."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from vtui.layouts import LayoutError, save_layout
from vtui.ui.messages import LayoutOpened, LayoutSaved

if TYPE_CHECKING:
    from textual.worker import Worker

    from vtui.ui.app import VtuiApp

# The dialogs (vtui.ui.screens.dialogs) and the flag schema's save check are imported where they are used:
# the first frame shows neither (tests/ui/test_ui_start_imports.py).


class LayoutFiles:
    def __init__(self, app: VtuiApp) -> None:
        self._app = app

    def save(self) -> None:
        """Save to the layout's file (ask for one when it has none)."""
        store = self._app.store
        if store.path is None:
            self.save_as()
        else:
            self.write(Path(store.path))

    def save_as(self) -> None:
        """Ask for a path and save there (another file that exists: only once the user confirms)."""
        from vtui.ui.screens.dialogs import ConfirmScreen, PathScreen

        app = self._app
        default = str(app.store.path or Path("layouts") / f"{app.store.layout.session.name}.toml")

        def chosen(text: str | None) -> None:
            if not text:
                return
            path = Path(text).expanduser()
            if path.exists() and (app.store.path is None or path.resolve() != Path(app.store.path).resolve()):

                def overwrite(ok: bool | None) -> None:
                    if ok:
                        self.write(path)

                app.push_screen(ConfirmScreen(f"{path} exists. Overwrite it?"), overwrite)
            else:
                self.write(path)

        app.push_screen(PathScreen("Save layout as", default), chosen)

    def write(self, path: Path) -> Worker[bool]:
        """Save the running layout to `path` in a worker, which answers whether it was saved."""
        return self._app.run_worker(
            partial(self._write, path), name="_save", group="layout", exit_on_error=False
        )

    async def _write(self, path: Path) -> bool:
        from vtui.telemetry.flagschema import save_check

        app = self._app
        # what the file held when this dashboard last read or saved it: a change made to it since by hand
        # is kept (merged), not undone (vtui.layouts.merge)
        running = replace(app.supervisor.layout, origin=app.store.saved_layout.origin)
        if app.store.path is not None and Path(app.store.path) == path and running.path != path:
            running = replace(running, path=path)  # the file this session was last saved to
        # Saving to the layout's own file edits it in place (comments, order, ${VAR} kept); elsewhere: a
        # full rewrite.
        layout = replace(running, path=path)
        try:
            await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
            # the flags are checked against each instance's own vLLM (the bundled schema without one)
            check = await asyncio.to_thread(save_check, running)
            if check.problems:
                app.notify(f"not saved {path}: " + "; ".join(check.problems), severity="error", timeout=10)
                return False
            await asyncio.to_thread(save_layout, running, path, flags=check.flags)
            written = await asyncio.to_thread(path.read_bytes)
        except (OSError, LayoutError) as exc:
            app.notify(f"could not save {path}: {exc}", severity="error", timeout=10)
            return False
        if check.notes:
            app.notify("saved; " + "; ".join(check.notes), timeout=6)
        origin = written.decode("utf-8", errors="replace").removeprefix("\ufeff")
        app.post_message(LayoutSaved(replace(layout, origin=origin), path))
        return True

    def open(self) -> None:
        """Ask for a layout file and open it (over unsaved changes: only once the user confirms)."""
        from vtui.ui.screens.dialogs import ConfirmScreen, PathScreen

        app = self._app

        def chosen(text: str | None) -> None:
            if not text:
                return
            if app.store.dirty:

                def anyway(ok: bool | None) -> None:
                    if ok:
                        self._read(Path(text).expanduser())

                app.push_screen(ConfirmScreen("The running layout has unsaved changes. Open anyway?"), anyway)
            else:
                self._read(Path(text).expanduser())

        app.push_screen(PathScreen("Open layout", str(app.store.path or "layouts/")), chosen)

    def _read(self, path: Path) -> Worker[None]:
        return self._app.run_worker(
            partial(self._load, path), name="_open", group="layout", exit_on_error=False
        )

    async def _load(self, path: Path) -> None:
        try:
            from vtui.telemetry.flagschema import load_resolved

            layout = (await asyncio.to_thread(load_resolved, path))[0]
        except (OSError, LayoutError) as exc:
            self._app.notify(f"could not open {path}: {exc}", severity="error", timeout=15)
            return
        self._app.post_message(LayoutOpened(layout))
