"""Which instance actions apply, in one table: the screens' greyed-out keys (`InstanceScreen.check_action`)
and the command palette's entries both read it, so a key and its palette entry can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vtui.core.refusals import sleep_problem
from vtui.core.state import State
from vtui.ui.store import InstanceView

if TYPE_CHECKING:
    from vtui.ui.app import VtuiApp


@dataclass(frozen=True)
class InstanceAction:
    action: str  # the Textual action name, as in the bindings ("restart" for action_restart)
    verb: str  # the palette's "instance: VERB NAME"
    help: str
    applies: Callable[[InstanceView], bool]


def _always(view: InstanceView) -> bool:
    return True


def _launched(view: InstanceView) -> bool:
    """vtui launches it: not an attached server (engine = "external"), which vtui only watches — never
    starts, stops or restarts — and whose flags and log are not vtui's."""
    return view.spec is None or view.spec.engine != "external"


INSTANCE_ACTIONS: tuple[InstanceAction, ...] = (
    InstanceAction("start", "start", "launch it", lambda v: _launched(v) and not v.state.running),
    InstanceAction(
        "stop",
        "stop",
        "stop its process group",
        lambda v: _launched(v) and (v.state.running or v.state == State.BACKOFF),
    ),
    InstanceAction(
        "restart", "restart", "graceful restart", lambda v: _launched(v) and v.state != State.STOPPING
    ),
    InstanceAction(
        "rollback",
        "rollback",
        "restart with the flags before the last change (shows the diff first)",
        lambda v: _launched(v) and v.can_rollback(),
    ),
    InstanceAction("detail", "details", "history, facts, diagnosis", _always),
    InstanceAction("logs", "logs", "follow its log", _launched),
    InstanceAction("flags", "edit flags", "flag editor", _launched),
    InstanceAction(
        "bench",
        "bench",
        "load-test it (live progress, plot; results kept in the flag history)",
        lambda v: v.state == State.READY and not (v.status and v.status.host),  # not another host's
    ),
    InstanceAction(
        "tune",
        "tune",
        "find the best flags for a workload under a TTFT SLO (detached; follow, abort, resume here)",
        _launched,
    ),
    InstanceAction("presets", "presets", "throughput-first (A) / latency-first (B)", _launched),
    InstanceAction(
        "sleep_toggle",
        "sleep/wake",
        "vLLM sleep mode: free its GPU memory, keep the process (sleep_mode = true, loopback bind)",
        lambda v: (
            v.spec is not None and sleep_problem(v.spec) is None and v.state in (State.READY, State.ASLEEP)
        ),
    ),
)
BY_ACTION = {a.action: a for a in INSTANCE_ACTIONS}
SCREENS = (
    "detail",
    "logs",
    "flags",
    "presets",
    "bench",
    "tune",
)  # the actions that open a screen on the instance


def serving(view: InstanceView) -> bool:
    """It serves (or did, and sleeps): a fix or rollback of its flags goes back to the flags it serves
    with when the new ones do not start (the supervisor's `fallback`). A failed instance's flags are
    known not to start: there is nothing to go back to."""
    return view.state in (State.READY, State.UNHEALTHY, State.ASLEEP)


def applies(action: str, view: InstanceView | None) -> bool:
    """Whether `action` can be done on the instance shown by `view` now (False without an instance)."""
    entry = BY_ACTION.get(action)
    return entry is not None and view is not None and entry.applies(view)


def why_not(action: str, view: InstanceView | None) -> str:
    """Why `action` does nothing on the instance shown by `view` now: the one short line a greyed key
    says when it is pressed anyway."""
    entry = BY_ACTION.get(action)
    verb = entry.verb if entry else action
    if view is None:
        return f"{verb}: no instance selected"
    name, state = view.name, view.state.name
    if not _launched(view) and action not in ("detail", "bench"):
        return f"{name} is attached: vtui only watches it ({verb} is not vtui's to do)"
    if action == "start":
        return f"{name} is already {state}"
    if action == "stop":
        return f"{name} is {state}: nothing to stop"
    if action in ("restart", "rollback") and view.state == State.STOPPING:
        return f"{name} is STOPPING: {verb} once it has stopped"
    if action == "rollback":
        return f"{name}: no earlier flags to roll back to"
    if action == "bench":
        if view.status and view.status.host:
            return f"{name} runs on {view.status.host}: bench it there"
        return f"bench needs {name} READY (it is {state})"
    if action == "sleep_toggle":
        if view.spec is not None and not view.spec.sleep_mode:
            return f"{name}: sleep mode is off (sleep_mode = true in the layout)"
        if view.spec is not None and sleep_problem(view.spec):
            return f"{name}: sleep mode needs a loopback bind (host = 127.0.0.1)"
        return f"sleep/wake needs {name} READY or ASLEEP (it is {state})"
    return f"{verb} does not apply to {name} now ({state})"


def perform(app: VtuiApp, action: str, name: str) -> None:
    """Do `action` on instance `name` (the key and the palette entry call this alike)."""
    if action in SCREENS:
        app.screens.open(action, name)
    elif action == "start":
        app.control.start_instances([name])
    elif action == "stop":
        app.control.ask_stop(name)  # confirmed first unless settings.toml says `confirm = false`
    elif action == "restart":
        app.control.ask_restart(name)
    elif action == "rollback":
        app.control.rollback_instance(name)
    elif action == "sleep_toggle":
        view = app.store.views.get(name)
        asleep = view is not None and view.state == State.ASLEEP
        supervisor = app.supervisor
        app.control.call(
            f"{'wake' if asleep else 'sleep'} {name}",
            (lambda: supervisor.wake(name)) if asleep else (lambda: supervisor.sleep(name, 1)),
        )
    else:
        raise KeyError(action)
