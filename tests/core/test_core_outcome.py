"""The last-outcome record (`core.runstate.Outcome`) and `Instance.restore`: what a new supervisor takes
over from a run that ended while another one watched (or none did)."""

from __future__ import annotations

import stat
from pathlib import Path

from vtui.core.events import StateChanged
from vtui.core.instance import Instance
from vtui.core.model import InstanceSpec
from vtui.core.runstate import MASK, Outcome, RunStore
from vtui.core.state import State


class Clock:
    t = 1000.0

    def time(self) -> float:
        return self.t


def test_an_outcome_is_kept_beside_the_run_records_masked_and_private(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    outcome = Outcome(
        "s", "a", "failed", 5.0, {"api-key": "hunter2", "max-model-len": 8}, 2, "boom", "oom", 4.0
    )
    store.save_outcome(outcome)
    path = store.outcome_path("s", "a")
    assert "hunter2" not in path.read_text() and stat.S_IMODE(path.stat().st_mode) == 0o600
    back = store.load_outcome("s", "a")
    assert back is not None and back.flags == {"api-key": MASK, "max-model-len": 8}
    assert (back.state, back.restarts, back.last_error, back.diagnosis, back.failed_at) == (
        "failed",
        2,
        "boom",
        "oom",
        4.0,
    )
    assert store.all("s") == []  # never mistaken for a run record (nothing to adopt)
    store.clear_outcome("s", "a")
    assert store.load_outcome("s", "a") is None


def test_restore_takes_over_a_failure_and_a_later_start_clears_it() -> None:
    events: list = []
    inst = Instance(
        InstanceSpec(name="a", model="m", port=1), clock=Clock(), emit=events.append, log_path=Path("/x")
    )
    inst.restore(State.FAILED, restarts=3, last_error="boom", failed_at=7.0, diagnosis="oom")
    assert (inst.state, inst.restarts, inst.last_error, inst.failed_at, inst.diagnosis) == (
        State.FAILED,
        3,
        "boom",
        7.0,
        "oom",
    )
    assert [(e.old, e.new) for e in events if isinstance(e, StateChanged)] == [(State.STOPPED, State.FAILED)]
    inst.restore(State.CRASHED, restarts=0, last_error=None)  # only into a STOPPED instance
    assert inst.state is State.FAILED and inst.restarts == 3
    assert inst.begin_launch()
    assert inst.last_error is None and inst.failed_at is None and inst.diagnosis is None
    assert inst.restarts == 3  # the count stays (as a live supervisor's does)


def test_a_failure_notes_when_it_happened() -> None:
    clock = Clock()
    inst = Instance(
        InstanceSpec(name="a", model="m", port=1), clock=clock, emit=lambda _e: None, log_path=Path("/x")
    )
    assert inst.begin_launch()
    inst.attach(object())
    clock.t = 1234.0
    inst.on_exit(1)
    assert inst.state in (State.FAILED, State.BACKOFF, State.CRASHED) and inst.failed_at == 1234.0
