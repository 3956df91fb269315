"""What the user asks of the supervisor about instances (`InstanceControl`), each call in its own worker.

Workers never touch widgets or the store: they await the supervisor, whose events come back through
the bridge. Errors become notifications. The layout files: vtui.ui.layout_files; quitting:
vtui.ui.quitting.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from textual.screen import Screen

from vtui.core.masking import masked
from vtui.core.model import FlagValue, InstanceSpec
from vtui.core.refusals import PreflightError, RestartReverted
from vtui.ui.actions import serving, why_not

if TYPE_CHECKING:
    from textual.worker import Worker

    from vtui.ui.app import VtuiApp

# The dialogs (vtui.ui.screens.dialogs) are imported where they are used: the first frame shows none
# (tests/ui/test_ui_start_imports.py).


class InstanceControl:
    """Start, stop, restart, roll back and the flag editor's kept edits, asked of the App's supervisor
    (the one it has when asked: another layout opened brings another)."""

    def __init__(self, app: VtuiApp) -> None:
        self._app = app

    def call(self, label: str, make: Callable[[], Awaitable[object]]) -> Worker[None]:
        """Await `make()` in a worker of the "control" group; its failure is said as `label`'s."""
        return self._app.run_worker(
            partial(self._call, label, make), name="_call", group="control", exit_on_error=False
        )

    async def _call(self, label: str, make: Callable[[], Awaitable[object]]) -> None:
        try:
            await make()
        except PreflightError as exc:
            for problem in exc.problems:
                self._app.notify(f"{label}: {problem}", severity="error", timeout=10)
        except Exception as exc:  # noqa: BLE001 — shown to the user; the worker must not take the app down
            self._app.notify(f"{label} failed: {exc}", severity="error", timeout=10)

    def start_instances(self, names: Iterable[str] | None) -> None:
        names = list(names) if names is not None else None
        self.call(f"start {', '.join(names) if names else 'all'}", lambda: self._app.supervisor.start(names))

    def stop_instances(self, names: Iterable[str] | None) -> None:
        names = list(names) if names is not None else None
        self.call(f"stop {', '.join(names) if names else 'all'}", lambda: self._app.supervisor.stop(names))

    def confirmed(self, question: str, then: Callable[[], None]) -> None:
        """Run `then` once the user says yes (at once with `confirm = false` in settings.toml's [ui])."""
        if not self._app.settings.confirm:
            then()
            return

        def answered(ok: bool | None) -> None:
            if ok:
                then()

        from vtui.ui.screens.dialogs import ConfirmScreen

        self._app.push_screen(ConfirmScreen(question), answered)

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
        view = self._app.store.views.get(name)
        if view is not None and note:
            view.pending_note = note
        self.call(f"{label} {name}", lambda: self._restart_told(name, spec, label, fallback))

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
            await self._app.supervisor.restart(name, spec, label=label, fallback=fallback)
        except RestartReverted as exc:
            self._app.notify(
                f"{label} {name}: the new flags did not start; back on the old flags. {exc}",
                severity="error",
                timeout=15,
            )
            return
        except PreflightError as exc:
            for problem in exc.problems:
                self._app.notify(
                    f"{label} {name}: not applied, nothing was stopped: {problem}",
                    severity="error",
                    timeout=10,
                )
            return
        if then is not None:
            then()
        if label == "fix":  # with fallback the supervisor answers once it is READY; else once launched
            self._app.notify(
                f"{name}: fix applied, {'READY' if fallback else 'starting'} with the new flags", timeout=6
            )
        elif label == "rollback":
            self._app.notify(f"{name}: rolled back to the flags before the last change", timeout=6)

    def rollback_instance(self, name: str) -> None:
        """Back to the flags before the last change (whatever that change produced), once the user has
        seen the flag diff and confirmed it."""
        view = self._app.store.views.get(name)
        flags = view.rollback_flags() if view is not None else None
        if view is None or view.spec is None or flags is None or not view.can_rollback():
            self._app.notices.say_why_not(why_not("rollback", view))
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
        if kept == self._app.store.pending.get(name):
            return
        edits = dict(self._app.store.pending)
        if kept is None:
            edits.pop(name, None)
        else:
            edits[name] = kept
        self._app.store.set_pending(edits)
        self._app.screens.refresh(None)
        self.call(
            f"keep the flag edits of {name}", lambda: self._app.supervisor.set_pending(name, flags, base)
        )

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
        view = self._app.store.views[name]
        old = dict(view.spec.flags) if view.spec else {}

        def clear() -> None:  # the store is the App's: cleared by call_later, not from the worker
            self._app.call_later(self.keep_edits, name, None)

        async def restart_then_clear() -> None:
            await self._restart_told(name, spec, label, fallback, then=clear)

        def answered(ok: bool | None) -> None:
            if not ok:
                return
            if pop is not None and pop in self._app.screen_stack:
                if pop.is_modal:
                    pop.dismiss()
                else:
                    self._app.pop_screen()
            if clears_edits:
                if note and name in self._app.store.views:
                    self._app.store.views[name].pending_note = note
                self.call(f"{label} {name}", restart_then_clear)
            else:
                self.restart_instance(name, spec, note=note, label=label, fallback=fallback)

        from vtui.ui.screens.dialogs import DiffScreen, spec_changes

        fields = spec_changes(view.spec, spec) if view.spec else {}
        self._app.push_screen(
            DiffScreen(name, old, dict(spec.flags), title=f"Restart {name} ({note})?", fields=fields),
            answered,
        )
