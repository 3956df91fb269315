"""Attached servers (`engine = "external"`): a vLLM vtui did not start, watched like the others — state
from `/health`, metrics scraped by the session supervisor — but never started, stopped or restarted.

`Attached` is the `Instance` of such a server: its state follows the probes alone (no process, no log,
no restart policy, no watchdog, no sleep), along the lifecycle's own edges:

    STOPPED (not probed yet) → READY       /health answered 200
                             → UNREACHABLE  no answer (refused, DNS, timeout…)
                             → UNHEALTHY    an answer other than 200 (a 503 while it starts, a proxy's 502)
    READY → UNREACHABLE / UNHEALTHY after `unreachable_after` / `unhealthy_after` misses in a row (a busy
    server may miss one probe); UNREACHABLE / UNHEALTHY → READY on the next 200.

Its probes are the one health probe's (`supervisor.health.HealthProbe`: httpx with TLS verified and the
API key as a bearer token, or the session supervisor's lean client for plain http without a key).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from vtui.core.instance import Instance
from vtui.core.model import InstanceSpec
from vtui.core.state import State
from vtui.supervisor.handle import ProcessHandle

__all__ = ["Attached", "AttachedRefused", "Probe", "is_attached", "no_answer"]


def is_attached(spec: InstanceSpec) -> bool:
    return spec.engine == "external"


class AttachedRefused(ValueError):
    """An action that does not apply to an attached server (start, stop, restart, sleep, wake)."""


@dataclass(frozen=True)
class Probe:
    """One `/health` probe of an attached server: the HTTP status (None: no answer) and why not."""

    status: int | None
    error: str | None = None


class Attached(Instance[ProcessHandle]):
    """The state machine of an attached server (see the module's docstring)."""

    def __init__(self, spec: InstanceSpec, *, unreachable_after: int = 3, **kw: Any) -> None:
        super().__init__(spec, **kw)
        self.unreachable_after = unreachable_after
        self.probed = False  # a first probe was made (before it: STOPPED, not settled)
        self._no_answer = 0
        self._bad_answers = 0
        self._local: tuple[int, float] | None = None  # (pid, create time) of its listener on this machine
        self._looked_at = -1e9  # when the listener was last searched for (a miss is retried after 30 s)

    def on_probe(self, probe: Probe) -> None:
        self.probed = True
        url = f"{self.spec.base_url}/health"
        if probe.status == 200:
            self._no_answer = self._bad_answers = 0
            if self.state is not State.READY:
                reason = "answers /health" if self.state is State.STOPPED else "answers /health again"
                self.ready_since = self.clock.time()
                self.unhealthy_since = None
                self._reset_watch()
                self.last_error = None
                self._set_state(State.READY, reason)  # STOPPED/UNREACHABLE/UNHEALTHY -> READY
            return
        if probe.status is None:
            self._no_answer += 1
            self._bad_answers = 0
            self.last_error = f"{url}: {probe.error or 'no answer'}"
            due = self.state in (State.READY, State.UNHEALTHY) and self._no_answer >= self.unreachable_after
            if self.state is State.STOPPED or due:
                self.ready_since = None
                self._set_state(State.UNREACHABLE, self.last_error)  # STOPPED/READY/UNHEALTHY -> UNREACHABLE
            return
        self._bad_answers += 1
        self._no_answer = 0
        self.last_error = f"{url} answered {probe.status}"
        due = self.state is State.READY and self._bad_answers >= self.unhealthy_after
        if self.state in (State.STOPPED, State.UNREACHABLE) or due:
            self.unhealthy_since = self.clock.time()
            self._set_state(State.UNHEALTHY, self.last_error)  # STOPPED/UNREACHABLE/READY -> UNHEALTHY

    def local_pids(self, now: float) -> set[int]:
        """The processes of the server when it runs on this machine (a loopback URL): its port's
        listener and that one's descendants (EngineCore, workers), so GPU memory is attributed to it.
        The listener is searched for once (psutil's socket table), then kept while it lives."""
        import psutil

        host = self.spec.host
        if not (host in ("localhost", "::1") or host.startswith("127.")):
            return set()
        proc = None
        if self._local is not None:
            try:
                proc = psutil.Process(self._local[0])
                if proc.create_time() != self._local[1]:
                    proc = None
            except psutil.Error:
                proc = None
        if proc is None and now - self._looked_at >= 30.0:
            self._looked_at = now
            proc = _listener(self.spec.port)
        if proc is None:
            self._local = None
            return set()
        try:
            self._local = (proc.pid, proc.create_time())
            return {proc.pid, *(child.pid for child in proc.children(recursive=True))}
        except psutil.Error:
            self._local = None
            return set()

    # -- nothing of it is vtui's to launch, stop, restart or put to sleep -------------------------------
    def begin_launch(self, spec: InstanceSpec | None = None) -> bool:
        return False

    def begin_stop(self) -> ProcessHandle | None:
        return None

    def begin_policy_stop(self, reason: str) -> ProcessHandle | None:
        return None

    def policy_stop_due(self) -> str | None:
        return None

    def idle_sleep_due(self) -> bool:
        return False

    def start_overdue(self) -> bool:
        return False

    def restart_due(self) -> bool:
        return False

    def on_health(self, ok: bool) -> None:
        return None  # its probes go through on_probe

    def on_exit(
        self, returncode: int | None, described: str | None = None, *, not_retried: str | None = None
    ) -> None:
        return None

    def adopt(self, handle: ProcessHandle, *, healthy: bool, started_at: float | None = None) -> None:
        return None

    @property
    def settled(self) -> bool:
        """Probed once: READY, UNREACHABLE or UNHEALTHY is where it is until the server changes."""
        return self.probed

    @property
    def kv_allocated_or_done(self) -> bool:
        return True  # holds none of this machine's GPUs for vtui: never makes a launch wait


def _listener(port: int) -> Any:
    """The psutil.Process listening on TCP `port`, None when none is visible (another user's, no rights)."""
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            try:
                return psutil.Process(conn.pid)
            except psutil.Error:
                return None
    return None


def no_answer(exc: BaseException) -> str:
    """`ConnectError: connection refused`: why a probe got no answer, in one short line (the OS error
    under the client's, where there is one: httpx says "All connection attempts failed")."""
    cause: BaseException | None = exc
    for _ in range(4):
        if cause is None:
            break
        if isinstance(cause, OSError) and cause.errno:  # a resolver's errno is negative: its own text
            text = os.strerror(cause.errno) if cause.errno > 0 else (cause.strerror or str(cause))
            return f"{type(exc).__name__}: {text.lower()}"
        cause = cause.__cause__ or cause.__context__
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__
