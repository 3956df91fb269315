"""Instance lifecycle states and the table of allowed edges (DESIGN.md, "Instance lifecycle")."""

from __future__ import annotations

import enum


class State(enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    UNHEALTHY = "unhealthy"
    STOPPING = "stopping"
    CRASHED = "crashed"
    BACKOFF = "backoff"
    FAILED = "failed"
    ASLEEP = "asleep"  # vLLM sleep mode: the process lives, its weights / KV cache memory is freed
    WAKING = "waking"  # /wake_up sent, not answered yet
    UNREACHABLE = "unreachable"  # an attached server (engine = "external") whose URL does not answer

    @property
    def running(self) -> bool:
        """True while a process of this instance may be alive."""
        return self in (
            State.STARTING,
            State.READY,
            State.UNHEALTHY,
            State.STOPPING,
            State.ASLEEP,
            State.WAKING,
        )


class Phase(enum.Enum):
    """Sub-phases of STARTING, read from the startup log (telemetry.startup_log)."""

    SPAWNED = "spawned"
    LOADING_WEIGHTS = "loading weights"
    PROFILING = "profiling"
    KV_CACHE = "kv cache allocated"
    CAPTURING_GRAPHS = "capturing graphs"
    API_UP = "api up"

    @property
    def rank(self) -> int:
        """Position in the startup order (SPAWNED 0 ... API_UP 5): the declaration order above."""
        return _PHASE_RANK[self]

    def advances(self, current: Phase | None) -> bool:
        """True when this phase comes after `current` (any phase advances from none): a STARTING
        instance's phase only moves forward, whatever order the log lines arrive in."""
        return current is None or self.rank > current.rank


_PHASE_RANK: dict[Phase, int] = {phase: index for index, phase in enumerate(Phase)}


# Allowed edges. Every state change goes through Instance._set_state, which checks this table.
TRANSITIONS: dict[State, frozenset[State]] = {
    # READY: re-adopted a live process, or an attached server's first /health answer; UNREACHABLE /
    # UNHEALTHY: an attached server's first probe got no answer / a bad one; FAILED / CRASHED: how the
    # last run ended, restored by a new supervisor from its outcome record (Instance.restore)
    State.STOPPED: frozenset(
        {State.STARTING, State.READY, State.UNREACHABLE, State.UNHEALTHY, State.FAILED, State.CRASHED}
    ),
    State.STARTING: frozenset({State.READY, State.CRASHED, State.STOPPING, State.FAILED}),
    # READY -> STOPPING: a stop, or the stuck watchdog (restart_stuck_after); READY -> ASLEEP: /sleep answered
    # READY -> UNREACHABLE: an attached server stopped answering
    State.READY: frozenset({State.UNHEALTHY, State.CRASHED, State.STOPPING, State.ASLEEP, State.UNREACHABLE}),
    # UNHEALTHY -> STOPPING: a stop, or the liveness restart (restart_unhealthy_after)
    State.UNHEALTHY: frozenset({State.READY, State.CRASHED, State.STOPPING, State.UNREACHABLE}),
    # an attached server's URL answers again (READY, or UNHEALTHY: not 200); nothing of it is vtui's to stop
    State.UNREACHABLE: frozenset({State.READY, State.UNHEALTHY}),
    # STOPPING -> CRASHED: a policy stop (liveness / stuck) ended; the restart policy follows
    State.STOPPING: frozenset({State.STOPPED, State.CRASHED}),
    State.ASLEEP: frozenset({State.WAKING, State.CRASHED, State.STOPPING}),
    # WAKING -> ASLEEP: /wake_up failed; WAKING -> READY: /wake_up answered
    State.WAKING: frozenset({State.READY, State.ASLEEP, State.CRASHED, State.STOPPING}),
    State.CRASHED: frozenset({State.BACKOFF, State.FAILED, State.STOPPED, State.STARTING}),
    State.BACKOFF: frozenset({State.STARTING, State.STOPPED, State.FAILED}),
    State.FAILED: frozenset({State.STARTING, State.STOPPED}),
}


class IllegalTransition(RuntimeError):
    """A state change that the lifecycle table does not allow: a bug, never a user error."""


def check_edge(old: State, new: State) -> None:
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(f"{old.name} -> {new.name} is not a lifecycle edge")
