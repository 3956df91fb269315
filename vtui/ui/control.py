"""What the user asks of the supervisor and the layout files, each call in its own worker.

Workers never touch widgets or the store: they await the supervisor (whose events come back through
the bridge) or post LayoutSaved / LayoutOpened for the App's handlers. Errors become notifications.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual import work
from textual.screen import Screen

from vtui.core.api import SupervisorApi
from vtui.core.masking import masked
from vtui.core.model import FlagValue, InstanceSpec
from vtui.core.refusals import PreflightError, RestartReverted
from vtui.layouts import LayoutError, save_layout
from vtui.ui.actions import serving, why_not
from vtui.ui.messages import LayoutOpened, LayoutSaved
from vtui.ui.settings import UiSettings
from vtui.ui.store import Store
from vtui.ui.textual_private import NoticeRoutingApp

WHY_NOT_SECONDS = 3.0  # how long a "why nothing happened" notice shows

# The dialogs (vtui.ui.screens.dialogs) and the flag schema's save check are imported where they are used:
# the first frame shows neither (tests/ui/test_ui_start_imports.py).


class ControlMixin(NoticeRoutingApp[int]):
    """The App's requests (VtuiApp's base): the supervisor and the store are set by VtuiApp."""

    supervisor: SupervisorApi
    store: Store
    settings: UiSettings = UiSettings()

    @work(exit_on_error=False, group="control")
    async def _call(self, label: str, make: Callable[[], Awaitable[object]]) -> None:
        try:
            await make()
        except PreflightError as exc:
            for problem in exc.problems:
                self.notify(f"{label}: {problem}", severity="error", timeout=10)
        except Exception as exc:  # noqa: BLE001 — shown to the user; the worker must not take the app down
            self.notify(f"{label} failed: {exc}", severity="error", timeout=10)

    _why_not_said: tuple[str, float] | None = None  # the last "why nothing happened" notice, and when

    def say_why_not(self, reason: str) -> None:
        """Say why a key did nothing: one short warning, not repeated while the same one is still shown
        (a key held down or pressed again)."""
        now = time.monotonic()
        said = self._why_not_said
        if said is not None and said[0] == reason and now - said[1] < WHY_NOT_SECONDS:
            return
        self._why_not_said = (reason, now)
        self.notify(reason, severity="warning", timeout=WHY_NOT_SECONDS)

    # -- instances ---------------------------------------------------------------------------------
    def start_instances(self, names: Iterable[str] | None) -> None:
        names = list(names) if names is not None else None
        self._call(f"start {', '.join(names) if names else 'all'}", lambda: self.supervisor.start(names))

    def stop_instances(self, names: Iterable[str] | None) -> None:
        names = list(names) if names is not None else None
        self._call(f"stop {', '.join(names) if names else 'all'}", lambda: self.supervisor.stop(names))

    def confirmed(self, question: str, then: Callable[[], None]) -> None:
        """Run `then` once the user says yes (at once with `confirm = false` in settings.toml's [ui])."""
        if not self.settings.confirm:
            then()
            return

        def answered(ok: bool | None) -> None:
            if ok:
                then()

        from vtui.ui.screens.dialogs import ConfirmScreen

        self.push_screen(ConfirmScreen(question), answered)

    def ask_stop(self, name: str) -> None:
        self.confirmed(f"Stop {name}? Its process group ends.", lambda: self.stop_instances([name]))

    def ask_restart(self, name: str) -> None:
        self.confirmed(
            f"Restart {name}? Requests in flight are cut off.", lambda: self.restart_instance(name)
        )

    def restart_instance(
        self,
        name: str,
        spec: InstanceSpec | None = None,
        note: str | None = None,
        *,
        label: str = "restart",
        fallback: bool = False,
    ) -> None:
        """Restart through the supervisor's queue for `name` (`label`: what the operation is called there
        and in the notices; `fallback`: new flags that do not reach READY go back to the flags before)."""
        view = self.store.views.get(name)
        if view is not None and note:
            view.pending_note = note
        self._call(f"{label} {name}", lambda: self._restart_told(name, spec, label, fallback))

    async def _restart_told(
        self,
        name: str,
        spec: InstanceSpec | None,
        label: str,
        fallback: bool,
        then: Callable[[], None] | None = None,
    ) -> None:
        """The restart, and its outcome said: a fix that reached READY is "applied"; flags the supervisor
        went back from are named (RestartReverted); flags refused before anything stopped, too."""
        try:
            await self.supervisor.restart(name, spec, label=label, fallback=fallback)
        except RestartReverted as exc:
            self.notify(
                f"{label} {name}: the new flags did not start; back on the old flags. {exc}",
                severity="error",
                timeout=15,
            )
            return
        except PreflightError as exc:
            for problem in exc.problems:
                self.notify(
                    f"{label} {name}: not applied, nothing was stopped: {problem}",
                    severity="error",
                    timeout=10,
                )
            return
        if then is not None:
            then()
        if label == "fix":  # with fallback the supervisor answers once it is READY; else once launched
            self.notify(
                f"{name}: fix applied, {'READY' if fallback else 'starting'} with the new flags", timeout=6
            )
        elif label == "rollback":
            self.notify(f"{name}: rolled back to the flags before the last change", timeout=6)

    def rollback_instance(self, name: str) -> None:
        """Back to the flags before the last change (whatever that change produced), once the user has
        seen the flag diff and confirmed it."""
        view = self.store.views.get(name)
        flags = view.rollback_flags() if view is not None else None
        if view is None or view.spec is None or flags is None or not view.can_rollback():
            self.say_why_not(why_not("rollback", view))
            return
        spec = view.spec.with_flags(flags, unset=[k for k in view.spec.flags if k not in flags])
        # while it serves, rollback flags that do not start go back to the ones it serves with
        self.review_and_restart(name, spec, note="rollback", label="rollback", fallback=serving(view))

    def keep_edits(
        self, name: str, flags: Mapping[str, FlagValue] | None, base: Mapping[str, FlagValue] | None = None
    ) -> None:
        """The flag editor's edits of `name`, made from the flags `base`, not applied (None: none left)
        to the session's owner, which keeps them for every dashboard of the session (`core.pending`) and
        rebases them when the instance is restarted with other flags; shown here at once."""
        kept = masked(flags) if flags else None
        if kept == self.store.pending.get(name):
            return
        edits = dict(self.store.pending)
        if kept is None:
            edits.pop(name, None)
        else:
            edits[name] = kept
        self.store.set_pending(edits)
        self._refresh_screens(None)
        self._call(f"keep the flag edits of {name}", lambda: self.supervisor.set_pending(name, flags, base))

    def review_and_restart(
        self,
        name: str,
        spec: InstanceSpec,
        note: str | None = None,
        pop: Screen[Any] | None = None,
        clears_edits: bool = False,
        *,
        label: str = "restart",
        fallback: bool = False,
    ) -> None:
        """Show old vs new flags; restart with the new ones only when the user confirms (then close `pop`,
        the screen the change was made on). `clears_edits`: the flags are the flag editor's pending edits,
        dropped once the restart was asked for (kept when it is refused). `label`, `fallback`: as
        `restart_instance`."""
        view = self.store.views[name]
        old = dict(view.spec.flags) if view.spec else {}

        def clear() -> None:  # the store is the App's: cleared by call_later, not from the worker
            self.call_later(self.keep_edits, name, None)

        async def restart_then_clear() -> None:
            await self._restart_told(name, spec, label, fallback, then=clear)

        def answered(ok: bool | None) -> None:
            if not ok:
                return
            if pop is not None and pop in self.screen_stack:
                if pop.is_modal:
                    pop.dismiss()
                else:
                    self.pop_screen()
            if clears_edits:
                if note and name in self.store.views:
                    self.store.views[name].pending_note = note
                self._call(f"{label} {name}", restart_then_clear)
            else:
                self.restart_instance(name, spec, note=note, label=label, fallback=fallback)

        from vtui.ui.screens.dialogs import DiffScreen, spec_changes

        fields = spec_changes(view.spec, spec) if view.spec else {}
        self.push_screen(
            DiffScreen(name, old, dict(spec.flags), title=f"Restart {name} ({note})?", fields=fields),
            answered,
        )

    def save_then_quit(self) -> None:
        """Quit's "save first": save the layout to its file (ask for one when it has none), then quit and
        leave the instances running."""

        async def save_and_exit(path: Path) -> None:
            if await self._save(path).wait():  # not saved: the error is shown, vtui stays
                self._close_and_exit(False)

        def go(path: Path) -> None:
            self.run_worker(save_and_exit(path), group="shutdown", exit_on_error=False)

        if self.store.path is not None:
            go(Path(self.store.path))
        else:
            from vtui.ui.screens.dialogs import PathScreen

            self.push_screen(
                PathScreen("Save layout as, then quit", f"layouts/{self.store.layout.session.name}.toml"),
                lambda text: go(Path(text).expanduser()) if text else None,
            )

    # -- layouts -----------------------------------------------------------------------------------
    def action_save_layout(self) -> None:
        if self.store.path is None:
            self.action_save_layout_as()
        else:
            self._save(Path(self.store.path))

    def action_save_layout_as(self) -> None:
        from vtui.ui.screens.dialogs import ConfirmScreen, PathScreen

        default = str(self.store.path or Path("layouts") / f"{self.store.layout.session.name}.toml")

        def chosen(text: str | None) -> None:
            if not text:
                return
            path = Path(text).expanduser()
            if path.exists() and (
                self.store.path is None or path.resolve() != Path(self.store.path).resolve()
            ):

                def overwrite(ok: bool | None) -> None:
                    if ok:
                        self._save(path)

                self.push_screen(ConfirmScreen(f"{path} exists. Overwrite it?"), overwrite)
            else:
                self._save(path)

        self.push_screen(PathScreen("Save layout as", default), chosen)

    def _close_and_exit(self, stop_instances: bool) -> None:  # pragma: no cover - VtuiApp's
        raise NotImplementedError

    def _refresh_screens(self, names: Iterable[str] | None) -> None:  # pragma: no cover - VtuiApp's
        raise NotImplementedError

    @work(exit_on_error=False, group="layout")
    async def _save(self, path: Path) -> bool:
        from vtui.telemetry.flagschema import save_check

        # what the file held when this dashboard last read or saved it: a change made to it since by hand
        # is kept (merged), not undone (vtui.layouts.merge)
        running = replace(self.supervisor.layout, origin=self.store.saved_layout.origin)
        if self.store.path is not None and Path(self.store.path) == path and running.path != path:
            running = replace(running, path=path)  # the file this session was last saved to
        # Saving to the layout's own file edits it in place (comments, order, ${VAR} kept); elsewhere: a
        # full rewrite.
        layout = replace(running, path=path)
        try:
            await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
            # the flags are checked against each instance's own vLLM (the bundled schema without one)
            check = await asyncio.to_thread(save_check, running)
            if check.problems:
                self.notify(f"not saved {path}: " + "; ".join(check.problems), severity="error", timeout=10)
                return False
            await asyncio.to_thread(save_layout, running, path, flags=check.flags)
            written = await asyncio.to_thread(path.read_bytes)
        except (OSError, LayoutError) as exc:
            self.notify(f"could not save {path}: {exc}", severity="error", timeout=10)
            return False
        if check.notes:
            self.notify("saved; " + "; ".join(check.notes), timeout=6)
        origin = written.decode("utf-8", errors="replace").removeprefix("\ufeff")
        self.post_message(LayoutSaved(replace(layout, origin=origin), path))
        return True

    def action_open_layout(self) -> None:
        from vtui.ui.screens.dialogs import ConfirmScreen, PathScreen

        def chosen(text: str | None) -> None:
            if not text:
                return
            if self.store.dirty:

                def anyway(ok: bool | None) -> None:
                    if ok:
                        self._open(Path(text).expanduser())

                self.push_screen(
                    ConfirmScreen("The running layout has unsaved changes. Open anyway?"), anyway
                )
            else:
                self._open(Path(text).expanduser())

        self.push_screen(PathScreen("Open layout", str(self.store.path or "layouts/")), chosen)

    @work(exit_on_error=False, group="layout")
    async def _open(self, path: Path) -> None:
        try:
            from vtui.telemetry.flagschema import load_resolved

            layout = (await asyncio.to_thread(load_resolved, path))[0]
        except (OSError, LayoutError) as exc:
            self.notify(f"could not open {path}: {exc}", severity="error", timeout=15)
            return
        self.post_message(LayoutOpened(layout))
