"""Shared plumbing of the supervision commands (up, down, ps, logs, restart): layout resolution, the
connection to the session supervisor (found by the layout file it runs, else started on demand),
progress lines from its feed, and the `vtui ps` row of an instance.

Cheap to import: `vtui ps` against a running supervisor loads no layout code, psutil or httpx.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vtui.core.masking import masked
from vtui.service.client import (
    ServiceClient,
    ServiceError,
    ServiceUnavailable,
    ensure_supervisor,
    find_supervisor,
)

if TYPE_CHECKING:
    from vtui.core.events import Event
    from vtui.core.model import Layout

__all__ = [
    "CommandError",
    "FeedFollower",
    "ServiceError",
    "ServiceUnavailable",
    "Session",
    "ServiceClient",
    "base_url_of",
    "connect",
    "ensure_supervisor",
    "follow_feed",
    "load_session",
    "print_json",
    "progress_printer",
    "refuse_attached",
    "row_of",
]


class CommandError(Exception):
    """A user-facing failure: already printed; carries the exit code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def load_session(words: Iterable[str], *, starts: bool = True) -> tuple[Layout, list[str]]:
    """`[LAYOUT] NAME…` -> (layout, names); prints the problems and raises CommandError(2) when unusable.
    `starts=False` (down, ps, logs: stopping and listing never need a secret): an unset `${VAR}` is no
    problem; `up`, `restart` and `check` still report it."""
    from vtui.layouts import LayoutError, NoLayoutError, remember_last, split_layout_args
    from vtui.telemetry import flagschema

    try:
        path, names = split_layout_args(words)
        # checked against the flags of the vLLM each instance runs (read once per version, cached), so
        # what `up` accepted, ps, down and logs read too
        layout, warnings = flagschema.load_resolved(
            path, unset_ok=not starts, notify=lambda line: print(f"vtui: {line}", file=sys.stderr)
        )
        for warning in warnings if starts else ():
            print(f"vtui: warning: {warning}", file=sys.stderr)
    except NoLayoutError as exc:
        print(f"vtui: {exc.message}", file=sys.stderr)
        raise CommandError(2) from exc
    except LayoutError as exc:
        for problem in exc.problems:
            print(f"vtui: {problem}", file=sys.stderr)
        raise CommandError(2) from exc
    remember_last(path)
    from vtui.supervisor.replicas import supervised

    run = supervised(layout, port_for_metrics=lambda: 0).names()  # a replica group's copies and router
    unknown = [n for n in names if n not in layout.names() and n not in run]
    if unknown:
        print(
            f"vtui: no instance named {', '.join(unknown)} in {path} "
            f"(instances: {', '.join(dict.fromkeys([*layout.names(), *run]))})",
            file=sys.stderr,
        )
        raise CommandError(2)
    return layout, names


# -- the session supervisor ------------------------------------------------------------------------
class Session:
    """A command's view of its session: the supervisor's client and its status, and the layout when
    one was loaded (None when the supervisor was found by the layout's path alone)."""

    def __init__(self, client: ServiceClient, names: list[str], layout: Layout | None, started: bool) -> None:
        self.client = client
        self.names = names
        self.layout = layout
        self.started = started
        self._status: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.client.session

    def status(self, refresh: bool = False) -> dict[str, Any]:
        if self._status is None or refresh:
            found, self.client.found_status = self.client.found_status, None  # fetched a moment ago
            self._status = found if found is not None and not refresh else self.client.get("/status")
        return self._status

    def instance_names(self) -> list[str]:
        """The instances, then the names of replica groups (each stands for its replicas and router)."""
        instances = self.status()["instances"]
        names = [i["name"] for i in instances]
        return names + [g for g in dict.fromkeys(i.get("group") for i in instances) if g and g not in names]


def _recorded_last() -> str | None:
    """The last session's layout path as recorded (read directly: no layout code on the fast path)."""
    from vtui.core import paths

    try:
        text = (paths.state_dir() / "last_session").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def _layout_word(words: list[str], layout_only: bool) -> tuple[str | None, list[str]]:
    """The layout file the words name (or the last session's) and the instance names, for the fast
    path only: a word that is not an existing file (a shipped layout's name, a typo) gets None, and the
    caller takes the full rule of `vtui.layouts.split_layout_args`."""
    if words and (layout_only or words[0].endswith(".toml") or Path(words[0]).expanduser().is_file()):
        path = Path(words[0]).expanduser()
        return (str(path.resolve()) if path.is_file() else None), words[1:]
    return _recorded_last(), words


def connect(
    words: Iterable[str],
    *,
    command: str,
    reload: bool = False,
    layout_only: bool = False,
    starts: bool = True,
) -> Session:
    """The session supervisor of `[LAYOUT] NAME…` (`layout_only`: the words are just `[LAYOUT]`). A
    live supervisor given that layout file answers even when the file was moved, deleted or no longer
    validates; otherwise the layout is loaded (exit 2 when unusable) and its session's supervisor
    started on demand. `reload`: make it run the file as it is now (`vtui up`). `starts=False` (ps, down,
    logs): an unset `${VAR}` in the layout is no problem. Unknown names exit 2."""
    words = list(words)
    path, names = _layout_word(words, layout_only)
    client = None
    layout = None
    started = False
    try:
        client = None if reload else find_supervisor(path)  # another API version: its one line, exit 1
        if client is not None and names:
            rows = client.get("/status")["instances"]
            listed = {i["name"] for i in rows} | {i.get("group") for i in rows}
            if not set(names) <= listed:
                client = None  # maybe the first word names a layout after all: the full rule decides
        if client is None:
            layout, names = load_session(words, starts=starts)
            assert layout.path is not None
            client, started = ensure_supervisor(layout.session.name, layout.path)
            if reload and not started:
                from vtui.layouts import referenced_vars

                env = {v: os.environ[v] for v in referenced_vars(layout) if v in os.environ}
                client.post("/layout", {"path": str(layout.path), "env": env})
        session = Session(client, names, layout, started)
        known = session.instance_names()
    except ServiceError as exc:
        for problem in exc.problems:
            print(f"vtui {command}: {problem}", file=sys.stderr)
        raise CommandError(2 if exc.status in (400, 404, 409) else 1) from exc
    except ServiceUnavailable as exc:
        print(f"vtui {command}: {exc}", file=sys.stderr)
        raise CommandError(1) from exc
    unknown = [n for n in names if n not in known]
    if unknown:
        print(
            f"vtui {command}: no instance named {', '.join(unknown)} in session {session.name} "
            f"(instances: {', '.join(known)})",
            file=sys.stderr,
        )
        raise CommandError(2)
    return session


# -- output ----------------------------------------------------------------------------------------
def progress_printer(started: float | None = None) -> Callable[[Event], None]:
    """Prints one line per lifecycle change, phase and notice (not log lines)."""
    from vtui.core.events import Notice, PhaseChanged, StateChanged

    t0 = started if started is not None else time.monotonic()

    def show(event: Event) -> None:
        stamp = f"{time.monotonic() - t0:6.1f}s"
        if isinstance(event, StateChanged):
            extra = f": {event.reason}" if event.reason else ""
            print(f"{stamp}  {event.instance}: {event.new.value}{extra}", flush=True)
        elif isinstance(event, PhaseChanged):
            print(f"{stamp}  {event.instance}: starting ({event.phase.value})", flush=True)
        elif isinstance(event, Notice):
            prefix = "" if event.level == "info" else f"{event.level}: "
            print(f"{stamp}  {prefix}{event.text}", flush=True)

    return show


class FeedFollower:
    """The supervisor's events handed to `on_event` from a daemon thread, with each instance's last
    known state (from the feed's hello, then its state changes), so a command can print its summary
    after the progress lines that led to it (`settle`), and stop the feed before it returns (`stop`):
    no line is printed after the command is done."""

    def __init__(self, client: ServiceClient, on_event: Callable[[Event], None]) -> None:
        self._client = client
        self._on_event = on_event
        self.opened = threading.Event()
        self.ended = threading.Event()
        self._stopped = False
        self._sock: Any = None
        self._states: dict[str, str] = {}
        self._changed = threading.Condition()
        self._handing = threading.Lock()  # held while an event is handed on: stop() waits for it

    def start(self, timeout: float = 10.0) -> FeedFollower:
        """Start the thread; return once the feed is open (so nothing the next request causes is
        missed)."""
        threading.Thread(target=self._pump, name="vtui-feed", daemon=True).start()
        self.opened.wait(timeout)
        return self

    def _connected(self, sock: Any) -> None:
        self._sock = sock

    def _pump(self) -> None:
        from vtui.core.events import StateChanged
        from vtui.service.wire import decode_event

        try:
            for message in self._client.feed(on_connect=self._connected):
                kind = message.get("type")
                if kind == "hello":
                    with self._changed:
                        self._states = {i["name"]: i["state"] for i in message.get("instances") or []}
                        self._changed.notify_all()
                    self.opened.set()
                elif kind == "event":
                    event = decode_event(message["event"])
                    with self._handing:
                        if self._stopped:
                            return
                        self._on_event(event)
                    if isinstance(event, StateChanged):
                        with self._changed:
                            self._states[event.instance] = event.new.value
                            self._changed.notify_all()
        except (ServiceUnavailable, ServiceError, OSError, ValueError):
            pass
        finally:
            self.opened.set()
            self.ended.set()
            with self._changed:
                self._changed.notify_all()

    def settle(self, states: dict[str, str], timeout: float = 3.0) -> bool:
        """Wait (at most `timeout`) until the feed has shown each instance in the state the supervisor
        reported (`/wait`'s answer): its progress lines are then printed before the summary."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while any(self._states.get(name) != state for name, state in states.items()):
                left = deadline - time.monotonic()
                if left <= 0 or self.ended.is_set():
                    return False
                self._changed.wait(left)
        return True

    def stop(self) -> None:
        """No more events are handed on; the connection is shut down."""
        import socket

        with self._handing:
            self._stopped = True
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def follow_feed(client: ServiceClient, on_event: Callable[[Event], None]) -> FeedFollower:
    """Follow the supervisor's feed (see FeedFollower); returns once the feed is open."""
    return FeedFollower(client, on_event).start()


def row_of(instance: dict[str, Any], supervisor_pid: int, now: float | None = None) -> dict[str, Any]:
    """One `vtui ps` row from the supervisor's snapshot of an instance."""
    spec = instance.get("spec") or {}
    started = instance.get("started_at")
    now = time.time() if now is None else now
    return {
        "name": instance["name"],
        "state": instance["state"],
        "phase": instance.get("phase"),
        "pid": instance.get("pid"),
        "port": spec.get("port"),
        "gpus": list(spec.get("gpus") or []),
        "restarts": instance.get("restarts", 0),
        "model": spec.get("model"),
        "engine": spec.get("engine"),
        "started_at": started,
        "uptime_s": round(now - started, 1) if started is not None and instance.get("pid") else None,
        "last_error": instance.get("last_error"),
        "failed_at": instance.get("failed_at"),  # the last run's CRASHED / FAILED, kept across supervisors
        "diagnosis": instance.get("diagnosis"),
        "log_path": instance.get("log_path"),
        "flags": masked(dict(spec.get("flags") or {})),
        "url": base_url_of(spec) if spec.get("engine") == "external" else None,  # an attached server
        "in_layout": instance.get("in_layout", True),
        "adopted": instance.get("adopted", False),
        "supervisor_pid": supervisor_pid,
        # replicas = N: the entry it came from, "replica" or "router", and the replicas a router routes to
        "group": instance.get("group"),
        "role": instance.get("role"),
        "workers": instance.get("workers"),
        # its operation queue (supervisor.opqueue): the one running and the one waiting behind it
        "operation": instance.get("operation"),
        "waiting": instance.get("waiting"),
    }


def refuse_attached(session: Session, name: str, command: str, verb: str) -> bool:
    """True (the refusal printed) when `name` is an attached server: vtui never starts, stops or
    restarts one (`vtui restart`/`sleep`/`wake` exit 2 on it)."""
    from vtui.core.refusals import attached_refusal
    from vtui.core.runstate import spec_from_dict

    inst = next((i for i in session.status()["instances"] if i["name"] == name), None)
    spec = (inst or {}).get("spec") or {}
    if spec.get("engine") != "external":
        return False
    print(f"vtui {command}: {attached_refusal(spec_from_dict(spec), verb)}", file=sys.stderr)
    return True


def base_url_of(spec: dict[str, Any]) -> str:
    """`InstanceSpec.base_url` of a spec as the supervisor sends it."""
    if spec.get("url"):
        return str(spec["url"]).rstrip("/")
    host = spec.get("host") or "127.0.0.1"
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{spec.get('port')}"


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))
