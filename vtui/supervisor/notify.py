"""Tell someone: run the layout's `[session] on_event` command, and POST to its `[session] webhook`, when an
instance crashed, failed, recovered, ran out of restarts, fell asleep or woke.

    [session]
    on_event = ["notify-send", "vtui"]      # the event as JSON on the command's stdin
    webhook = "http://127.0.0.1:9000/hook"  # the same JSON POSTed (application/json)
    on_event_cooldown = 60                  # seconds; per (instance, event kind)

`Notifier.notify` never blocks: it drops an event that repeats within the cooldown (the next one sent says
how many were dropped), queues the rest (bounded), and worker threads deliver them, one for the command
and one for the webhook, so a slow one does not hold the other up. The command runs in its own session
with its output discarded, and is killed (its whole group) after `timeout` seconds; the webhook has the
same timeout. Failures go to the `log` callback, never to the caller.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

CRASHED = "crashed"  # exited without being asked (any code, or a signal)
FAILED = "failed"  # gave up: the start failed or timed out and no restart follows
RECOVERED = "recovered"  # READY again after a crash or a restart
RESTART_BUDGET_EXHAUSTED = "restart_budget_exhausted"  # max_restarts used up
ASLEEP = "asleep"
WOKE = "woke"
EVENT_KINDS = (CRASHED, FAILED, RECOVERED, RESTART_BUDGET_EXHAUSTED, ASLEEP, WOKE)
DEFAULT_COOLDOWN = 60.0
DEFAULT_TIMEOUT = 10.0
MAX_PENDING = 64


@dataclass(frozen=True)
class NotifyEvent:
    """What the command reads on stdin and the webhook receives, as JSON (`payload`)."""

    kind: str  # one of EVENT_KINDS
    instance: str
    session: str
    message: str = ""  # e.g. "killed by SIGTERM; running then: pkill (pid 12: pkill -f vllm)"
    time: float = field(default_factory=time.time)
    details: Mapping[str, object] = field(default_factory=dict)  # e.g. {"signal": 15, "restarts": 2}

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {self.kind!r} (one of {', '.join(EVENT_KINDS)})")
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))

    def payload(self, suppressed: int = 0) -> bytes:
        body = {
            "event": self.kind,
            "instance": self.instance,
            "session": self.session,
            "message": self.message,
            "time": self.time,
            "details": dict(self.details),
            "suppressed_since_last": suppressed,
        }
        return json.dumps(body, default=str).encode()


class Notifier:
    """Delivers events to a command and/or a webhook off the caller's thread, with a per-(instance, kind)
    cooldown. `close()` stops the workers (after what is queued, up to `wait` seconds)."""

    def __init__(
        self,
        command: Sequence[str] | None = None,
        webhook: str | None = None,
        cooldown: float = DEFAULT_COOLDOWN,
        timeout: float = DEFAULT_TIMEOUT,
        log: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.command = tuple(command) if command else None
        self.webhook = webhook or None
        self.cooldown = max(0.0, float(cooldown))
        self.timeout = timeout
        self.log = log or (lambda _line: None)
        self.clock = clock
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], float] = {}
        self._dropped: dict[tuple[str, str], int] = {}
        self._queues: list[queue.Queue[bytes | None]] = []
        self._threads: list[threading.Thread] = []
        for name, deliver in (("command", self._run_command), ("webhook", self._post)):
            if (self.command if name == "command" else self.webhook) is None:
                continue
            q: queue.Queue[bytes | None] = queue.Queue(maxsize=max_pending)
            thread = threading.Thread(
                target=self._worker, args=(q, deliver), name=f"vtui-notify-{name}", daemon=True
            )
            thread.start()
            self._queues.append(q)
            self._threads.append(thread)

    @classmethod
    def from_session(cls, session: object, log: Callable[[str], None] | None = None) -> Notifier | None:
        """The notifier a layout's [session] asks for (None when it sets neither on_event nor webhook)."""
        command = getattr(session, "on_event", None)
        webhook = getattr(session, "webhook", None)
        if not command and not webhook:
            return None
        cooldown = getattr(session, "on_event_cooldown", None)
        return cls(command, webhook, DEFAULT_COOLDOWN if cooldown is None else cooldown, log=log)

    @property
    def enabled(self) -> bool:
        return bool(self._queues)

    def notify(self, event: NotifyEvent) -> bool:
        """Queue `event` for delivery; False when the cooldown or a full queue dropped it. Never blocks."""
        key = (event.instance, event.kind)
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.cooldown:
                self._dropped[key] = self._dropped.get(key, 0) + 1
                return False
            self._last[key] = now
            suppressed = self._dropped.pop(key, 0)
        body = event.payload(suppressed)
        sent = False
        for q in self._queues:
            try:
                q.put_nowait(body)
                sent = True
            except queue.Full:
                self.log(f"notify: queue full, dropped the {event.kind} event of {event.instance}")
        return sent

    def close(self, wait: float = 5.0) -> None:
        for q in self._queues:
            try:
                q.put_nowait(None)
            except queue.Full:
                pass
        deadline = time.monotonic() + wait
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- delivery (worker threads) ----------------------------------------------------------------
    def _worker(self, q: queue.Queue[bytes | None], deliver: Callable[[bytes], None]) -> None:
        while True:
            body = q.get()
            if body is None:
                return
            try:
                deliver(body)
            except Exception as exc:  # noqa: BLE001 — a delivery failure is logged, never raised
                self.log(f"notify: {exc}")

    def _run_command(self, body: bytes) -> None:
        assert self.command is not None
        try:
            proc = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # its own group: a timeout kills what it started too
                close_fds=True,
            )
        except OSError as exc:
            self.log(f"notify: cannot run on_event {self.command[0]!r}: {exc.strerror or exc}")
            return
        try:
            assert proc.stdin is not None
            try:
                proc.stdin.write(body)
                proc.stdin.close()
            except BrokenPipeError:
                pass  # it does not read stdin: fine
            code = proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            self.log(f"notify: on_event {self.command[0]!r} still running after {self.timeout:g}s: killed")
            return
        if code != 0:
            self.log(f"notify: on_event {self.command[0]!r} exited with code {code}")

    def _post(self, body: bytes) -> None:
        assert self.webhook is not None
        req = urllib.request.Request(
            self.webhook, data=body, method="POST", headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                resp.read(1 << 16)
        except OSError as exc:
            self.log(f"notify: webhook {self.webhook} failed: {exc}")
