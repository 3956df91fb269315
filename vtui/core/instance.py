"""One instance's lifecycle state machine: synchronous, driven by facts (spawned, health, exit, time).

The supervisor feeds it what it observes (including the outcome of a spawn it ran off the event loop:
`begin_launch`, then `attach` or `spawn_failed`); the instance decides the state. It never reaches the
OS, and time only through the injected clock, so tests replay whole histories without processes. Every change goes through `_set_state`, which checks the edge against
`core.state.TRANSITIONS` and emits `StateChanged`.
"""

from __future__ import annotations

import signal
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from vtui.core.clock import Clock
from vtui.core.events import Event, PhaseChanged, StateChanged
from vtui.core.model import InstanceSpec
from vtui.core.phases import phase_of, root_cause
from vtui.core.state import Phase, State, check_edge


def describe_exit(returncode: int | None) -> str:
    """`exited with code 1`, `killed by SIGKILL`, `exited (code unknown)`."""
    if returncode is None:
        return "exited (code unknown)"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


class SpawnError(RuntimeError):
    """The process could not be started at all (executable missing, log folder unwritable…)."""


class Instance:
    """State, phase, restart bookkeeping and the recent log lines of one instance."""

    def __init__(
        self,
        spec: InstanceSpec,
        *,
        clock: Clock,
        emit: Callable[[Event], None],
        log_path: Path,
        session: str = "vtui",
        unhealthy_after: int = 3,
        stable_after: float = 30.0,
        max_lines: int = 2000,
    ) -> None:
        self.spec = spec
        self.clock = clock
        self.emit = emit
        self.log_path = log_path
        self.session = session
        self.unhealthy_after = unhealthy_after  # consecutive failed probes before READY -> UNHEALTHY
        self.stable_after = stable_after  # READY this long before a crash resets the backoff exponent
        self.state = State.STOPPED
        self.phase: Phase | None = None
        self.handle: Any = None  # the launcher's process handle while a process may be alive
        self.restarts = 0  # restarts made by the policy (shown in `vtui ps`)
        self.attempt = 0  # consecutive failed runs; the backoff exponent
        self.last_error: str | None = None
        self.last_good_spec: InstanceSpec | None = None
        self.next_restart_at: float | None = None
        self.started_at: float | None = None
        self.ready_since: float | None = None
        self.adopted = False
        self.lines: deque[str] = deque(maxlen=max_lines)  # ring buffer of recent log lines
        self.run_lines: deque[str] = deque(maxlen=max_lines)  # lines of the current run (root cause)
        self._health_failures = 0

    # -- the one place a state changes ----------------------------------------------------------
    def _set_state(self, new: State, reason: str | None = None) -> None:
        old = self.state
        check_edge(old, new)
        self.state = new
        self.emit(StateChanged(self.spec.name, old, new, self.clock.time(), self.phase, reason))

    def _set_phase(self, phase: Phase) -> None:
        self.phase = phase
        self.emit(PhaseChanged(self.spec.name, phase, self.clock.time()))

    # -- commands --------------------------------------------------------------------------------
    def begin_launch(self, spec: InstanceSpec | None = None) -> bool:
        """A new process is about to be spawned (first start, manual start after a failure, or the
        policy restart out of BACKOFF, which counts in `restarts`): enter STARTING with no handle yet.
        The caller spawns, then reports `attach(handle)` or `spawn_failed(exc)`. False: already running."""
        if self.state.running:
            return False
        if spec is not None:
            self.spec = spec
        if self.state is State.BACKOFF:
            self.restarts += 1
        self.phase = Phase.SPAWNED
        self.handle = None
        self.run_lines.clear()
        self.next_restart_at = None
        self.ready_since = None
        self._health_failures = 0
        self.adopted = False
        self.started_at = self.clock.time()
        self._set_state(State.STARTING)  # STOPPED/CRASHED/BACKOFF/FAILED -> STARTING
        return True

    def attach(self, handle: Any) -> None:
        """The spawn begun by `begin_launch` succeeded: from now on exits and probes concern `handle`."""
        if self.state is State.STARTING and self.handle is None:
            self.handle = handle

    def spawn_failed(self, exc: BaseException) -> None:
        """The spawn begun by `begin_launch` could not start a process: FAILED (nothing to retry)."""
        self.handle = None
        self.last_error = str(exc) or exc.__class__.__name__
        if self.state is State.STARTING:
            self._set_state(State.FAILED, self.last_error)  # STARTING -> FAILED

    def adopt(self, handle: Any, *, healthy: bool, started_at: float | None = None) -> None:
        """Take over a live process a previous vtui started (pid + create time already verified)."""
        if self.state is not State.STOPPED:
            return
        self.handle = handle
        self.adopted = True
        self.started_at = started_at
        if healthy:
            self.phase = None
            self.ready_since = self.clock.time()
            self.last_good_spec = self.spec
            self._set_state(State.READY, "adopted")  # STOPPED -> READY
        else:
            self.phase = Phase.SPAWNED
            self._set_state(State.STARTING, "adopted")  # STOPPED -> STARTING

    def begin_stop(self) -> Any:
        """Enter STOPPING and hand back the process to stop (None: nothing alive, already STOPPED)."""
        if self.state.running and self.state is not State.STOPPING:
            self._set_state(State.STOPPING)  # STARTING/READY/UNHEALTHY -> STOPPING
            return self.handle
        if self.state in (State.CRASHED, State.BACKOFF, State.FAILED):
            self.next_restart_at = None
            self._set_state(State.STOPPED)  # CRASHED/BACKOFF/FAILED -> STOPPED
        return self.handle if self.state is State.STOPPING else None

    def finish_stop(self) -> None:
        """The launcher reports the whole process tree gone."""
        self.handle = None
        self.phase = None
        self.ready_since = None
        if self.state is State.STOPPING:
            self._set_state(State.STOPPED)  # STOPPING -> STOPPED

    # -- observations ----------------------------------------------------------------------------
    def on_lines(self, lines: Iterable[str]) -> None:
        """New log lines: keep them, and advance the STARTING phase they announce."""
        for line in lines:
            self.lines.append(line)
            self.run_lines.append(line)
            if self.state is State.STARTING:
                phase = phase_of(line)
                if phase is not None and phase.advances(self.phase):
                    self._set_phase(phase)

    def on_health(self, ok: bool) -> None:
        """One /health probe result. Refused connections while STARTING are normal (late bind)."""
        if ok:
            self._health_failures = 0
            if self.state is State.STARTING:
                self.ready_since = self.clock.time()
                self.last_good_spec = self.spec
                self._set_state(State.READY)  # STARTING -> READY
            elif self.state is State.UNHEALTHY:
                self._set_state(State.READY)  # UNHEALTHY -> READY
            return
        if self.state is State.READY:
            self._health_failures += 1
            if self._health_failures >= self.unhealthy_after:
                self._set_state(
                    State.UNHEALTHY, f"/health failed {self._health_failures} times"
                )  # READY -> UNHEALTHY

    def on_exit(self, returncode: int | None) -> None:
        """The leader process is gone (not by our stop): CRASHED, then what the restart policy says."""
        if self.state is State.STOPPING or not self.state.running:
            return
        now = self.clock.time()
        if self.ready_since is not None and now - self.ready_since >= self.stable_after:
            self.attempt = 0  # it ran fine for a while: this is a fresh failure, not a crash loop
        self.handle = None
        self.ready_since = None
        reason = root_cause(self.run_lines) if returncode != 0 else None
        reason = reason or describe_exit(returncode)
        if returncode != 0:
            self.last_error = reason
        self._set_state(State.CRASHED, reason)  # STARTING/READY/UNHEALTHY -> CRASHED
        self._after_crash(failed=returncode != 0, reason=reason)

    def start_overdue(self) -> bool:
        """STARTING with a live process for longer than the policy's `start_timeout` (0: no limit)."""
        limit = self.spec.restart.start_timeout
        return (
            self.state is State.STARTING
            and self.handle is not None
            and limit > 0
            and self.started_at is not None
            and self.clock.time() - self.started_at >= limit
        )

    def on_start_timeout(self) -> Any:
        """No /health answer within `start_timeout`: CRASHED (why: the limit, the startup phase reached,
        the last log line), then the restart policy as for a crash. Returns the process for the caller
        to end like a stop; from now on it no longer belongs to this instance."""
        if not self.start_overdue():
            return None
        handle = self.handle
        phase = (self.phase or Phase.SPAWNED).value
        last = next((line.strip() for line in reversed(self.run_lines) if line.strip()), "")
        reason = (
            f"no /health answer after {self.spec.restart.start_timeout:g} s (start_timeout), "
            f"stuck in phase '{phase}'" + (f"; last log line: {last[:200]}" if last else "")
        )
        self.handle = None
        self.ready_since = None
        self.last_error = reason
        self._set_state(State.CRASHED, reason)  # STARTING -> CRASHED
        self._after_crash(failed=True, reason=reason)
        return handle

    def _after_crash(self, *, failed: bool, reason: str) -> None:
        """The restart policy, from CRASHED: STOPPED (clean exit), stay CRASHED, BACKOFF or FAILED."""
        now = self.clock.time()
        policy = self.spec.restart
        if policy.mode == "never" or (policy.mode == "on-failure" and not failed):
            if not failed:
                self._set_state(State.STOPPED, "exited cleanly")  # CRASHED -> STOPPED
            return  # never: stays CRASHED
        if self.attempt >= policy.max_restarts:
            self._set_state(State.FAILED, self.last_error or reason)  # CRASHED -> FAILED
            return
        self.attempt += 1
        self.next_restart_at = now + policy.delay(self.attempt)
        self._set_state(
            State.BACKOFF, f"restart {self.attempt}/{policy.max_restarts} in {policy.delay(self.attempt):g}s"
        )  # CRASHED -> BACKOFF

    def restart_due(self) -> bool:
        return (
            self.state is State.BACKOFF
            and self.next_restart_at is not None
            and self.clock.time() >= self.next_restart_at
        )

    # -- derived ---------------------------------------------------------------------------------
    @property
    def settled(self) -> bool:
        """READY, FAILED, STOPPED, or CRASHED with no restart coming."""
        return self.state in (State.READY, State.FAILED, State.STOPPED, State.CRASHED)

    @property
    def kv_allocated_or_done(self) -> bool:
        """For staggered starts on a shared GPU: this one no longer competes for memory profiling."""
        if self.state is State.STARTING:
            return self.phase is not None and self.phase.rank >= Phase.KV_CACHE.rank
        return self.state is not State.BACKOFF
