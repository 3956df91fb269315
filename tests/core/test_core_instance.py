"""State-machine histories replayed with a fake clock and a fake launcher: no processes, no sleeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from vtui.core.events import PhaseChanged, StateChanged
from vtui.core.instance import Instance, SpawnError
from vtui.core.model import InstanceSpec, RestartPolicy
from vtui.core.state import Phase, State

S = State


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def time(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


class FakeLauncher:
    """Plays the supervisor's part in a launch: begin_launch, spawn (here: a token or an error), then
    attach or spawn_failed."""

    def __init__(self, fail: str | None = None) -> None:
        self.spawned: list[InstanceSpec] = []
        self.fail = fail

    def launch(self, inst: Instance) -> None:
        if not inst.begin_launch():
            return
        if self.fail:
            inst.spawn_failed(SpawnError(self.fail))
            return
        self.spawned.append(inst.spec)
        inst.attach(object())


class Launchable(Instance):
    """An Instance with the launcher's `launch` at hand, so histories read as they happen."""

    fake: FakeLauncher

    def launch(self) -> None:
        self.fake.launch(self)

    def relaunch(self) -> None:
        assert self.state is S.BACKOFF
        self.fake.launch(self)


def make(policy: RestartPolicy | None = None, fail: str | None = None):
    clock, launcher, events = FakeClock(), FakeLauncher(fail), []
    spec = InstanceSpec(name="a", model="m", port=8001, restart=policy or RestartPolicy())
    inst = Launchable(spec, clock=clock, emit=events.append, log_path=Path("/x.log"))
    inst.fake = launcher
    return inst, clock, launcher, events


def edges(events) -> list[tuple[State, State]]:
    return [(e.old, e.new) for e in events if isinstance(e, StateChanged)]


def test_start_then_ready_tracks_phases_and_last_good_spec():
    inst, clock, launcher, events = make()
    inst.launch()
    inst.on_health(False)  # refused while binding: still STARTING
    inst.on_lines(["INFO Loading weights took 0.1 s", "INFO CPU KV cache size: 3,000 tokens", "noise"])
    inst.on_lines(["INFO Loading weights again"])  # phases never go backwards
    clock.t += 5
    inst.on_health(True)
    assert edges(events) == [(S.STOPPED, S.STARTING), (S.STARTING, S.READY)]
    phases = [e.phase for e in events if isinstance(e, PhaseChanged)]
    assert phases == [Phase.LOADING_WEIGHTS, Phase.KV_CACHE]
    assert inst.last_good_spec == inst.spec and len(launcher.spawned) == 1


@pytest.mark.parametrize("ready_first", [False, True])
def test_crash_goes_through_backoff_with_doubling_delays_then_fails(ready_first):
    inst, clock, launcher, events = make(RestartPolicy("on-failure", max_restarts=3, backoff_initial=2))
    inst.launch()
    delays = []
    for _ in range(3):
        if ready_first:
            inst.on_health(True)
        inst.on_lines(["ValueError: bad flag value"])
        inst.on_exit(1)
        assert inst.state is S.BACKOFF
        delays.append(inst.next_restart_at - clock.t)
        clock.t += delays[-1] - 0.01
        assert not inst.restart_due()
        clock.t += 0.01
        assert inst.restart_due()
        inst.relaunch()
        assert inst.state is S.STARTING
    assert delays == [2, 4, 8]
    inst.on_lines(["RuntimeError: the last straw"])
    inst.on_exit(1)
    assert inst.state is S.FAILED and inst.last_error == "RuntimeError: the last straw"
    assert events[-1].reason == "RuntimeError: the last straw"
    assert len(launcher.spawned) == 4 and inst.restarts == 3
    first = S.READY if ready_first else S.STARTING
    crash = edges(events).index((first, S.CRASHED))
    assert edges(events)[crash : crash + 3] == [
        (first, S.CRASHED),
        (S.CRASHED, S.BACKOFF),
        (S.BACKOFF, S.STARTING),
    ]


def test_backoff_is_capped():
    inst, clock, _, _ = make(RestartPolicy("always", max_restarts=10, backoff_initial=2, backoff_max=10))
    inst.launch()
    delays = []
    for _ in range(5):
        inst.on_exit(1)
        delays.append(inst.next_restart_at - clock.t)
        clock.t = inst.next_restart_at
        inst.relaunch()
    assert delays == [2, 4, 8, 10, 10]


def test_policy_never_stays_crashed_with_error():
    inst, _, launcher, events = make(RestartPolicy("never"))
    inst.launch()
    inst.on_lines(["vllm: error: unrecognized arguments: --bogus"])
    inst.on_exit(2)
    assert inst.state is S.CRASHED and inst.settled
    assert inst.last_error == "vllm: error: unrecognized arguments: --bogus"
    assert len(launcher.spawned) == 1


def test_an_unasked_exit_is_a_failure_whatever_its_code():
    """supervisord's "unexpected" rule: code 0 without a stop (an outside SIGTERM) restarts too."""
    inst, _, _, events = make(RestartPolicy("on-failure"))
    inst.launch()
    inst.on_health(True)
    inst.on_exit(0, "exited with code 0; running then: pkill (pid 12: pkill -f vllm)")
    assert inst.state is S.BACKOFF
    crashed = [e for e in events if isinstance(e, StateChanged) and e.new is S.CRASHED][0]
    assert "pkill -f vllm" in (crashed.reason or "") and "unasked" in (crashed.reason or "")
    assert inst.last_error == crashed.reason
    inst, _, _, _ = make(RestartPolicy("never"))
    inst.launch()
    inst.on_exit(0)
    assert inst.state is S.CRASHED
    inst, _, _, events = make(RestartPolicy("on-failure"))
    inst.launch()
    inst.on_exit(-15, "killed by SIGTERM")
    assert inst.state is S.BACKOFF
    assert [e.reason for e in events if isinstance(e, StateChanged) and e.new is S.CRASHED] == [
        "killed by SIGTERM"
    ]


def test_stop_during_backoff_cancels_the_restart():
    inst, clock, launcher, events = make()
    inst.launch()
    inst.on_exit(-9)
    assert inst.begin_stop() is None
    assert inst.state is S.STOPPED and inst.next_restart_at is None
    clock.t += 100
    assert not inst.restart_due()
    assert len(launcher.spawned) == 1


def test_stop_while_running_ignores_the_exit_it_causes():
    inst, _, _, events = make()
    inst.launch()
    inst.on_health(True)
    handle = inst.begin_stop()
    assert handle is not None and inst.state is S.STOPPING
    inst.on_exit(-15)  # our own SIGTERM: not a crash
    inst.finish_stop()
    assert edges(events)[-2:] == [(S.READY, S.STOPPING), (S.STOPPING, S.STOPPED)]


def test_health_failures_make_it_unhealthy_then_ready_again():
    inst, _, _, events = make()
    inst.launch()
    inst.on_health(True)
    inst.on_health(False)
    inst.on_health(False)
    assert inst.state is S.READY  # a blip is not a state change
    inst.on_health(False)
    assert inst.state is S.UNHEALTHY
    inst.on_health(True)
    assert edges(events)[-2:] == [(S.READY, S.UNHEALTHY), (S.UNHEALTHY, S.READY)]


def test_stable_run_resets_the_backoff_exponent():
    inst, clock, _, _ = make(RestartPolicy("on-failure", max_restarts=2))
    inst.launch()
    for _ in range(5):  # crashes after a long healthy run never exhaust the budget
        inst.on_health(True)
        clock.t += 60
        inst.on_exit(1)
        assert inst.state is S.BACKOFF and inst.next_restart_at - clock.t == 2
        clock.t = inst.next_restart_at
        inst.relaunch()


def test_spawn_error_fails_at_once_with_the_reason():
    inst, _, _, events = make(fail="executable not found: vllm")
    inst.launch()
    assert inst.state is S.FAILED and inst.last_error == "executable not found: vllm"
    assert edges(events) == [(S.STOPPED, S.STARTING), (S.STARTING, S.FAILED)]


def test_adoption_is_ready_when_healthy_and_starting_otherwise():
    inst, _, launcher, events = make()
    inst.adopt(object(), healthy=True, started_at=5.0)
    assert inst.state is S.READY and inst.adopted and inst.started_at == 5.0
    inst.launch()  # a live adopted instance is never launched twice
    assert launcher.spawned == []
    inst2, *_ = make()
    inst2.adopt(object(), healthy=False)
    assert inst2.state is S.STARTING


def test_kv_gate_for_shared_gpu_starts():
    inst, _, _, _ = make()
    inst.launch()
    assert not inst.kv_allocated_or_done
    inst.on_lines(["(EngineCore pid=1) INFO GPU KV cache size: 100 tokens"])
    assert inst.kv_allocated_or_done


def test_launch_is_starting_without_a_process_until_the_spawn_reports():
    inst, _, _, events = make()
    assert inst.begin_launch()
    assert inst.state is S.STARTING and inst.handle is None and inst.phase is Phase.SPAWNED
    assert not inst.kv_allocated_or_done  # a GPU neighbour waits while the spawn runs
    assert not inst.begin_launch()  # STARTING already: a second launch is refused
    assert edges(events) == [(S.STOPPED, S.STARTING)]
    handle = object()
    inst.attach(handle)
    assert inst.handle is handle and inst.state is S.STARTING
    inst.attach(object())  # a second attach never replaces the process
    assert inst.handle is handle


def test_spawn_failure_after_begin_launch_fails_with_its_reason_and_drops_no_handle():
    inst, _, _, events = make()
    inst.begin_launch()
    inst.spawn_failed(OSError("[Errno 13] Permission denied: '/logs'"))
    assert inst.state is S.FAILED and inst.handle is None
    assert inst.last_error == "[Errno 13] Permission denied: '/logs'"
    assert events[-1].reason == inst.last_error
    inst.attach(object())  # a late attach after FAILED is ignored
    assert inst.handle is None


def test_begin_launch_out_of_backoff_counts_a_restart_and_others_do_not():
    inst, _, _, _ = make(RestartPolicy("always"))
    inst.begin_launch()
    inst.attach(object())
    inst.on_exit(1)
    assert inst.state is S.BACKOFF
    inst.begin_launch()
    assert inst.restarts == 1 and inst.state is S.STARTING
    inst.spawn_failed(SpawnError("gone"))
    inst.begin_launch()  # a manual start after FAILED is not a policy restart
    assert inst.restarts == 1


def test_stop_while_spawning_without_a_handle_ends_stopped():
    inst, _, _, events = make()
    inst.begin_launch()
    assert inst.begin_stop() is None and inst.state is S.STOPPING
    inst.finish_stop()
    assert edges(events) == [(S.STOPPED, S.STARTING), (S.STARTING, S.STOPPING), (S.STOPPING, S.STOPPED)]


def test_a_start_with_no_health_answer_times_out_into_the_restart_policy():
    inst, clock, launcher, events = make(
        RestartPolicy("on-failure", max_restarts=1, backoff_initial=2, start_timeout=60)
    )
    inst.launch()
    inst.on_lines(
        [
            "INFO Loading weights took 3 s",
            "INFO GPU KV cache size: 100 tokens",
            "INFO Capturing CUDA graphs 12/67",
            "  ",
        ]
    )
    inst.on_health(False)
    clock.t += 59.9
    assert not inst.start_overdue() and inst.on_start_timeout() is None
    clock.t += 0.1
    handle = inst.handle
    assert inst.start_overdue()
    assert inst.on_start_timeout() is handle  # handed over to be stopped; no longer this instance's
    assert inst.handle is None and inst.state is S.BACKOFF and not inst.start_overdue()
    reason = (
        "no /health answer after 60 s (start_timeout), stuck in phase 'capturing graphs'; "
        "last log line: INFO Capturing CUDA graphs 12/67"
    )
    assert inst.last_error == reason
    assert [(e.old, e.new, e.reason) for e in events if isinstance(e, StateChanged)][-2:] == [
        (S.STARTING, S.CRASHED, reason),
        (S.CRASHED, S.BACKOFF, "restart 1/1 in 2s"),
    ]
    clock.t = inst.next_restart_at
    inst.relaunch()
    assert inst.state is S.STARTING and inst.last_error == reason  # kept until a new verdict
    clock.t += 60
    inst.on_start_timeout()
    assert inst.state is S.FAILED and "stuck in phase 'spawned'" in inst.last_error
    assert "last log line" not in inst.last_error  # no line in this run
    assert len(launcher.spawned) == 2 and inst.restarts == 1


def test_start_timeout_zero_never_fires_and_ready_or_spawning_never_times_out():
    inst, clock, _, _ = make(RestartPolicy(start_timeout=0))
    inst.launch()
    clock.t += 10**6
    assert not inst.start_overdue() and inst.state is S.STARTING
    inst, clock, _, _ = make(RestartPolicy(start_timeout=5))
    inst.launch()
    inst.on_health(True)
    clock.t += 100
    assert not inst.start_overdue() and inst.state is S.READY
    inst, clock, _, _ = make(RestartPolicy(start_timeout=5))
    inst.begin_launch()  # the spawn has not reported yet: no process to judge
    clock.t += 100
    assert not inst.start_overdue()


def test_a_timed_out_start_with_policy_never_stays_crashed():
    inst, clock, _, _ = make(RestartPolicy("never", start_timeout=5))
    inst.launch()
    clock.t += 5
    assert inst.on_start_timeout() is not None
    assert inst.state is S.CRASHED and inst.settled and inst.next_restart_at is None


def test_a_start_that_would_fail_the_same_way_goes_to_failed_without_spending_the_budget():
    """Was: a config its log called deterministic was retried max_restarts times (26 s, the same error
    printed 4 times); the supervisor passes the log's verdict as `not_retried`."""
    inst, _, launcher, events = make(RestartPolicy("on-failure", max_restarts=3, backoff_initial=2))
    inst.launch()
    inst.on_lines(["ValueError: No available memory for the cache blocks."])
    inst.on_exit(1, not_retried="the same flags would fail again (no_kv_memory)")
    assert inst.state is S.FAILED and inst.attempt == 0 and inst.next_restart_at is None
    assert "not restarted: the same flags would fail again (no_kv_memory)" in inst.last_error
    assert edges(events)[-2:] == [(S.STARTING, S.CRASHED), (S.CRASHED, S.FAILED)]
    assert len(launcher.spawned) == 1


def test_a_crash_after_ready_still_restarts_by_policy_whatever_the_log_says():
    inst, *_ = make(RestartPolicy("on-failure", max_restarts=3, backoff_initial=2))
    inst.launch()
    inst.on_health(True)
    inst.on_exit(1, not_retried="the same flags would fail again (cuda_oom)")
    assert inst.state is S.BACKOFF and inst.attempt == 1
