"""One instance's lifecycle state machine: synchronous, driven by facts (spawned, health, exit, time).

The supervisor feeds it what it observes (including the outcome of a spawn it ran off the event loop:
`begin_launch`, then `attach` or `spawn_failed`); the instance decides the state. It never reaches the
OS, and time only through the injected clock, so tests replay whole histories without processes. Every change goes through `_set_state`, which checks the edge against
`core.state.TRANSITIONS` and emits `StateChanged`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from vtui.core.clock import Clock
from vtui.core.events import Event, PhaseChanged, StateChanged
from vtui.core.linering import LineRing
from vtui.core.model import InstanceSpec
from vtui.core.phases import phase_of, root_cause
from vtui.core.state import Phase, State, check_edge

# Counters that move when an instance gets work done (prompt and generation tokens; None: not reported):
# the stuck watchdog compares one metrics sample's with the last.
Progress = tuple[float | None, ...]


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


# vLLM 0.32's API server logs this from its SIGTERM/SIGINT handler (entrypoints/launchers/launcher.py) and
# then exits 0: the one trace an outside signal leaves (the kernel tells the sender only to the receiver).
SHUTDOWN_TRIGGERED = "[shutdown] API server: shutdown triggered"
SIGNALLED = f" after '{SHUTDOWN_TRIGGERED}': a SIGTERM (or SIGINT) from outside vtui"


class SpawnError(RuntimeError):
    """The process could not be started at all (executable missing, log folder unwritable…)."""


class Handle(Protocol):
    """A launcher's handle of a running process, as far as the model reads it (the supervisor's launcher
    makes the handles and reads the rest)."""

    @property
    def pid(self) -> int: ...


H = TypeVar("H", bound=Handle)


class Instance(Generic[H]):
    """State, phase, restart bookkeeping and the recent log lines of one instance. `H`: the type of the
    launcher's process handles."""

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
        self.handle: H | None = None  # the launcher's process handle while a process may be alive
        self.restarts = 0  # restarts made by the policy (shown in `vtui ps`)
        self.attempt = 0  # consecutive failed runs; the backoff exponent
        self.last_error: str | None = None
        self.failed_at: float | None = None  # when the last run ended in CRASHED / FAILED
        self.diagnosis: str | None = None  # the kind of its first recognised problem (supervisor sets it)
        self.last_good_spec: InstanceSpec | None = None
        self.next_restart_at: float | None = None
        self.started_at: float | None = None
        self.ready_since: float | None = None
        self.adopted = False
        self.lines = LineRing(max_lines)  # recent log lines (bounded in count and bytes)
        self.run_lines = LineRing(max_lines)  # lines of the current run (root cause), likewise
        self._health_failures = 0
        self.unhealthy_since: float | None = None  # when READY -> UNHEALTHY happened (liveness clock)
        self.sleep_level: int | None = None  # while ASLEEP / WAKING
        self._policy_stop: str | None = None  # why the policy is stopping it (liveness / stuck watchdog)
        self._progress: Progress | None = None  # the last metrics counters seen (stuck watchdog)
        self._progress_at: float | None = None  # when they last moved, or the instance was last idle
        self._busy = False  # requests running or waiting at the last metrics sample
        self._idle_since: float | None = None  # no request running or waiting since (idle sleep)

    # -- the one place a state changes ----------------------------------------------------------
    def _set_state(self, new: State, reason: str | None = None) -> None:
        old = self.state
        check_edge(old, new)
        self.state = new
        if new in (State.CRASHED, State.FAILED) and old is not State.STOPPED:  # STOPPED: restored
            self.failed_at = self.clock.time()
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
        else:  # a start someone asked for: the last run's failure is history
            self.last_error = self.failed_at = self.diagnosis = None
        self.phase = Phase.SPAWNED
        self.handle = None
        self.run_lines.clear()
        self.next_restart_at = None
        self.ready_since = None
        self._health_failures = 0
        self._reset_watch()
        self.adopted = False
        self.started_at = self.clock.time()
        self._set_state(State.STARTING)  # STOPPED/CRASHED/BACKOFF/FAILED -> STARTING
        return True

    def attach(self, handle: H) -> None:
        """The spawn begun by `begin_launch` succeeded: from now on exits and probes concern `handle`."""
        if self.state is State.STARTING and self.handle is None:
            self.handle = handle

    def spawn_failed(self, exc: BaseException) -> None:
        """The spawn begun by `begin_launch` could not start a process: FAILED (nothing to retry)."""
        self.handle = None
        self.last_error = str(exc) or exc.__class__.__name__
        if self.state is State.STARTING:
            self._set_state(State.FAILED, self.last_error)  # STARTING -> FAILED

    def adopt(self, handle: H, *, healthy: bool, started_at: float | None = None) -> None:
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

    def restore(
        self,
        state: State,
        *,
        restarts: int,
        last_error: str | None,
        failed_at: float | None = None,
        diagnosis: str | None = None,
    ) -> None:
        """A new supervisor takes over how the last run ended (`core.runstate.Outcome`): its restart
        count and error, and FAILED / CRASHED when it ended so (STOPPED -> FAILED / CRASHED, no process).
        Nothing is restored into an instance that runs or was started already."""
        if self.state is not State.STOPPED or self.handle is not None:
            return
        self.restarts = restarts
        self.last_error = last_error
        self.failed_at = failed_at
        self.diagnosis = diagnosis
        if state in (State.FAILED, State.CRASHED):
            self._set_state(state, last_error)  # STOPPED -> FAILED / CRASHED (restored)

    def begin_stop(self) -> H | None:
        """Enter STOPPING and hand back the process to stop (None: nothing alive, already STOPPED)."""
        if self.state.running and self.state is not State.STOPPING:
            self._set_state(State.STOPPING)  # STARTING/READY/UNHEALTHY/ASLEEP/WAKING -> STOPPING
            return self.handle
        if self.state in (State.CRASHED, State.BACKOFF, State.FAILED):
            self.next_restart_at = None
            self._set_state(State.STOPPED)  # CRASHED/BACKOFF/FAILED -> STOPPED
        return self.handle if self.state is State.STOPPING else None

    def begin_policy_stop(self, reason: str) -> H | None:
        """The liveness or stuck watchdog ends this run (`policy_stop_due` gave `reason`): STOPPING,
        and the process to stop like a user stop; `finish_stop` then makes it a failed run (CRASHED and
        the restart policy, counting toward max_restarts). None: not READY/UNHEALTHY any more."""
        if self.state not in (State.READY, State.UNHEALTHY) or self.handle is None:
            return None
        self._policy_stop = reason
        self.last_error = reason
        self._set_state(State.STOPPING, reason)  # UNHEALTHY -> STOPPING (liveness), READY -> STOPPING (stuck)
        return self.handle

    def finish_stop(self) -> None:
        """The launcher reports the whole process tree gone."""
        self.handle = None
        self.phase = None
        self.sleep_level = None
        reason, self._policy_stop = self._policy_stop, None
        if self.state is State.STOPPING and reason is not None:
            self._reset_attempts_if_stable(self.unhealthy_since or self._progress_at)  # healthy until then
            self.ready_since = None
            self._set_state(State.CRASHED, reason)  # STOPPING -> CRASHED (a policy stop ended)
            self._after_crash(failed=True, reason=reason)
            return
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
                self._reset_watch()
                self._set_state(State.READY)  # STARTING -> READY
            elif self.state is State.UNHEALTHY:
                self.unhealthy_since = None
                self._reset_watch()
                self._set_state(State.READY)  # UNHEALTHY -> READY
            return
        if self.state is State.READY:
            self._health_failures += 1
            if self._health_failures >= self.unhealthy_after:
                self.unhealthy_since = self.clock.time()
                self._set_state(
                    State.UNHEALTHY, f"/health failed {self._health_failures} times"
                )  # READY -> UNHEALTHY

    def on_exit(
        self, returncode: int | None, described: str | None = None, *, not_retried: str | None = None
    ) -> None:
        """The leader process is gone and nobody asked it to go: a failure whatever its code
        (supervisord's "unexpected" rule: an outside SIGTERM makes vLLM exit cleanly with 0), so
        CRASHED, then what the restart policy says. `described`: what the pump recorded
        (`ExitInfo.describe()`: the signal, the known killers running then). `not_retried`: why a
        start that failed would fail the same way again (its log says so): then FAILED at once, the
        restart budget untouched; a crash after READY still goes by the policy."""
        starting = self.state is State.STARTING
        if self.state is State.STOPPING or not self.state.running:
            return
        self._reset_attempts_if_stable()
        self.handle = None
        self.ready_since = None
        self.sleep_level = None
        exit_text = described or describe_exit(returncode)
        cause = root_cause(self.run_lines) if returncode != 0 else None
        telling = returncode is None or returncode < 0 or "running then" in exit_text  # a signal, killers
        reason = (f"{cause} ({exit_text})" if telling else cause) if cause else exit_text
        if returncode == 0:
            reason += ", unasked" + (
                SIGNALLED if any(SHUTDOWN_TRIGGERED in line for line in self.run_lines) else ""
            )
        self.last_error = reason
        self._set_state(State.CRASHED, reason)  # STARTING/READY/UNHEALTHY/ASLEEP/WAKING -> CRASHED
        if starting and not_retried:
            self.next_restart_at = None
            self.last_error = f"{reason}; not restarted: {not_retried}"
            self._set_state(State.FAILED, self.last_error)  # CRASHED -> FAILED (the same flags fail again)
            return
        self._after_crash(failed=True, reason=reason)

    def _reset_attempts_if_stable(self, until: float | None = None) -> None:
        end = self.clock.time() if until is None else until
        if self.ready_since is not None and end - self.ready_since >= self.stable_after:
            self.attempt = 0  # it ran fine for a while: this is a fresh failure, not a crash loop

    # -- liveness, stuck and idle watchdogs --------------------------------------------------------
    def _reset_watch(self) -> None:
        self.unhealthy_since = None
        self._progress = None
        self._progress_at = None
        self._busy = False
        self._idle_since = None

    def on_load(self, *, busy: bool, progress: Progress) -> None:
        """One metrics sample of a READY instance: whether requests run or wait (`busy`), and counters
        that move when work gets done (`progress`: prompt/generation tokens, finished requests)."""
        if self.state is not State.READY:
            return
        now = self.clock.time()
        if not busy or progress != self._progress or self._progress_at is None:
            self._progress_at = now
        self._progress = progress
        self._busy = busy
        if busy:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now

    def policy_stop_due(self) -> str | None:
        """Why the watchdogs end this run now, None when they do not: UNHEALTHY for
        `restart_unhealthy_after` seconds (liveness), or READY with requests waiting and nothing done
        for `restart_stuck_after` seconds (healthy but stuck)."""
        now = self.clock.time()
        policy = self.spec.restart
        limit = policy.restart_unhealthy_after
        if self.state is State.UNHEALTHY and limit > 0 and self.unhealthy_since is not None:
            if now - self.unhealthy_since >= limit:
                return (
                    f"UNHEALTHY for {now - self.unhealthy_since:.0f} s (restart_unhealthy_after = {limit:g})"
                )
        limit = policy.restart_stuck_after
        if self.state is State.READY and limit > 0 and self._busy and self._progress_at is not None:
            if now - self._progress_at >= limit:
                return (
                    f"stuck: /health answers but no token was produced and no request finished for "
                    f"{now - self._progress_at:.0f} s while requests waited (restart_stuck_after = {limit:g})"
                )
        return None

    def idle_sleep_due(self) -> bool:
        """READY, sleep mode on, and no request running or waiting for `idle_sleep_after` seconds."""
        limit = self.spec.idle_sleep_after
        return (
            self.state is State.READY
            and self.spec.sleep_mode
            and limit > 0
            and self._idle_since is not None
            and self.clock.time() - self._idle_since >= limit
        )

    # -- sleep mode ----------------------------------------------------------------------------------
    def on_slept(self, level: int, reason: str | None = None) -> None:
        """/sleep answered: READY -> ASLEEP (the process lives; its GPU memory is freed)."""
        if self.state is State.READY:
            self.sleep_level = level
            self._set_state(State.ASLEEP, reason or f"sleep level {level}")  # READY -> ASLEEP

    def begin_wake(self) -> bool:
        """ASLEEP -> WAKING before /wake_up is sent; False when not asleep."""
        if self.state is not State.ASLEEP:
            return False
        self._set_state(State.WAKING)  # ASLEEP -> WAKING
        return True

    def on_woke(self, ok: bool, reason: str | None = None) -> None:
        """/wake_up answered (ok): WAKING -> READY; it failed: WAKING -> ASLEEP, with why."""
        if self.state is not State.WAKING:
            return
        if ok:
            self.sleep_level = None
            self._health_failures = 0
            self._reset_watch()
            self._set_state(State.READY, reason)  # WAKING -> READY
        else:
            self._set_state(State.ASLEEP, reason)  # WAKING -> ASLEEP

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

    def on_start_timeout(self) -> H | None:
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

    def refuse_restart(self, reason: str) -> None:
        """The policy restart could not launch (the GPU memory check refused it): BACKOFF -> FAILED."""
        if self.state is State.BACKOFF:
            self.next_restart_at = None
            self.last_error = reason
            self._set_state(State.FAILED, reason)  # BACKOFF -> FAILED

    def restart_due(self) -> bool:
        return (
            self.state is State.BACKOFF
            and self.next_restart_at is not None
            and self.clock.time() >= self.next_restart_at
        )

    # -- derived ---------------------------------------------------------------------------------
    @property
    def settled(self) -> bool:
        """READY, ASLEEP, FAILED, STOPPED, or CRASHED with no restart coming."""
        return self.state in (State.READY, State.FAILED, State.STOPPED, State.CRASHED, State.ASLEEP)

    @property
    def kv_allocated_or_done(self) -> bool:
        """For staggered starts on a shared GPU: this one no longer competes for memory profiling."""
        if self.state is State.STARTING:
            return self.phase is not None and self.phase.rank >= Phase.KV_CACHE.rank
        return self.state is not State.BACKOFF
