"""The liveness / stuck watchdogs and the sleep states of the instance state machine, on a fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from vtui.core.events import StateChanged
from vtui.core.instance import Instance
from vtui.core.model import InstanceSpec, RestartPolicy
from vtui.core.state import TRANSITIONS, IllegalTransition, State, check_edge

S = State


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def time(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


def ready(policy: RestartPolicy | None = None, **spec_kw):
    clock, events = Clock(), []
    spec = InstanceSpec(name="a", model="m", port=8001, restart=policy or RestartPolicy(), **spec_kw)
    inst = Instance(spec, clock=clock, emit=events.append, log_path=Path("/x.log"))
    assert inst.begin_launch()
    inst.attach(object())
    inst.on_health(True)
    assert inst.state is S.READY
    return inst, clock, events


def edges(events):
    return [(e.old, e.new) for e in events if isinstance(e, StateChanged)]


def test_unhealthy_for_restart_unhealthy_after_stops_then_restarts_counting_the_budget():
    inst, clock, events = ready(RestartPolicy(restart_unhealthy_after=120, max_restarts=1, backoff_initial=1))
    for _ in range(3):
        inst.on_health(False)
    assert inst.state is S.UNHEALTHY
    clock.t += 119
    assert inst.policy_stop_due() is None
    clock.t += 1
    reason = inst.policy_stop_due()
    assert reason is not None and "restart_unhealthy_after = 120" in reason
    handle = inst.begin_policy_stop(reason)
    assert handle is not None and inst.state is S.STOPPING
    inst.on_exit(-15)  # the stop's own SIGTERM: ignored
    inst.finish_stop()
    assert edges(events)[-4:] == [
        (S.READY, S.UNHEALTHY),
        (S.UNHEALTHY, S.STOPPING),
        (S.STOPPING, S.CRASHED),
        (S.CRASHED, S.BACKOFF),
    ]
    clock.t += 1
    assert inst.restart_due() and inst.begin_launch()
    assert inst.restarts == 1
    inst.attach(object())
    inst.on_health(True)
    for _ in range(3):
        inst.on_health(False)
    clock.t += 120
    inst.begin_policy_stop(inst.policy_stop_due() or "")
    inst.finish_stop()
    assert inst.state is S.FAILED  # max_restarts = 1: the budget is spent


def test_liveness_off_and_recovery_reset_the_clock():
    inst, clock, _ = ready(RestartPolicy(restart_unhealthy_after=0))
    for _ in range(3):
        inst.on_health(False)
    clock.t += 10_000
    assert inst.policy_stop_due() is None
    inst, clock, _ = ready(RestartPolicy(restart_unhealthy_after=60))
    for _ in range(3):
        inst.on_health(False)
    clock.t += 50
    inst.on_health(True)
    for _ in range(3):
        inst.on_health(False)
    clock.t += 50
    assert inst.policy_stop_due() is None  # UNHEALTHY again only 50 s ago


def test_stuck_watchdog_needs_waiting_requests_and_no_progress():
    inst, clock, events = ready(RestartPolicy(restart_stuck_after=300))
    inst.on_load(busy=True, progress=(10.0, 100.0))
    clock.t += 200
    inst.on_load(busy=True, progress=(10.0, 150.0))  # tokens moved: not stuck
    clock.t += 299
    inst.on_load(busy=True, progress=(10.0, 150.0))
    assert inst.policy_stop_due() is None
    clock.t += 1
    inst.on_load(busy=True, progress=(10.0, 150.0))
    reason = inst.policy_stop_due()
    assert reason is not None and reason.startswith("stuck")
    inst.begin_policy_stop(reason)
    inst.finish_stop()
    assert edges(events)[-3:] == [(S.READY, S.STOPPING), (S.STOPPING, S.CRASHED), (S.CRASHED, S.BACKOFF)]


def test_idle_is_not_stuck_and_sleeps_when_opted_in():
    inst, clock, _ = ready(RestartPolicy(restart_stuck_after=10), sleep_mode=True, idle_sleep_after=60)
    inst.on_load(busy=False, progress=(0.0, 0.0))
    clock.t += 59
    inst.on_load(busy=False, progress=(0.0, 0.0))
    assert inst.policy_stop_due() is None and not inst.idle_sleep_due()
    clock.t += 1
    assert inst.idle_sleep_due()
    inst.on_load(busy=True, progress=(1.0, 0.0))
    assert not inst.idle_sleep_due()
    inst, clock, _ = ready(idle_sleep_after=60)  # sleep_mode off: never
    inst.on_load(busy=False, progress=(0.0, 0.0))
    clock.t += 1000
    assert not inst.idle_sleep_due()


def test_sleep_wake_edges_and_an_exit_while_asleep():
    inst, clock, events = ready(sleep_mode=True)
    inst.on_slept(2)
    assert inst.state is S.ASLEEP and inst.sleep_level == 2 and inst.settled
    inst.on_health(False)  # probes while asleep move nothing
    assert inst.state is S.ASLEEP
    assert inst.begin_wake() and inst.state is S.WAKING
    inst.on_woke(False, "wake_up answered 500")
    assert inst.state is S.ASLEEP
    assert inst.begin_wake()
    inst.on_woke(True)
    assert inst.state is S.READY and inst.sleep_level is None
    inst.on_slept(1)
    inst.on_exit(-9, "killed by SIGKILL")
    assert edges(events)[-2:] == [(S.ASLEEP, S.CRASHED), (S.CRASHED, S.BACKOFF)]


def test_the_new_edges_are_in_the_table_and_others_are_not():
    assert S.ASLEEP in TRANSITIONS[S.READY] and S.WAKING in TRANSITIONS[S.ASLEEP]
    assert S.CRASHED in TRANSITIONS[S.STOPPING]
    with pytest.raises(IllegalTransition):
        check_edge(S.ASLEEP, S.READY)  # waking goes through WAKING
    with pytest.raises(IllegalTransition):
        check_edge(S.STARTING, S.ASLEEP)
    assert S.ASLEEP.running and S.WAKING.running


def test_a_clean_exit_after_vllms_shutdown_line_names_the_outside_signal():
    inst, _, events = ready()
    inst.on_lines(
        ["(APIServer pid=7) INFO 12-01 10:00:00 [launcher.py:254] [shutdown] API server: shutdown triggered"]
    )
    inst.on_exit(0, "exited with code 0")
    crashed = [e for e in events if isinstance(e, StateChanged) and e.new is S.CRASHED][0]
    assert crashed.reason is not None and "SIGTERM" in crashed.reason and "unasked" in crashed.reason
    assert inst.state is S.BACKOFF
