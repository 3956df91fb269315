"""Restart with changed flags on a supervised sim: the new value reaches the engine and becomes the
last good spec; a bad value fails in vLLM's words, the diagnosis proposes the fix, and the rollback to
the last good spec comes back READY."""

from __future__ import annotations

from pathlib import Path

import pytest

from vtui.core.runstate import RunStore
from vtui.core.state import State
from vtui.layouts import load_layout
from vtui.telemetry.diagnosis import diagnose
from vtui.telemetry.startup_log import parse_startup

from .conftest import Recorder, assert_valid_path, sim_instance, supervisor, write_layout

pytestmark = pytest.mark.timeout(60)


def _status(sup, name: str):
    return {s.name: s for s in sup.status()}[name]


async def test_flag_change_then_bad_flag_then_rollback(tmp_path: Path, session: str) -> None:
    layout = load_layout(write_layout(tmp_path, session, [sim_instance("knob", gpus=(0,))]))
    sup = supervisor(layout)
    rec = Recorder(sup)
    try:
        await sup.start()
        assert (await sup.wait_settled(timeout=30))["knob"] is State.READY
        first_pid = _status(sup, "knob").pid

        # 1. A changed flag reaches the engine and becomes the rollback target.
        spec = sup.layout.instance("knob").with_flags({"max-num-seqs": 3})
        await sup.restart("knob", spec)
        assert (await sup.wait_settled(["knob"], timeout=30))["knob"] is State.READY
        status = _status(sup, "knob")
        assert status.pid != first_pid
        assert (
            status.spec.flags["max-num-seqs"] == 3 and sup.layout.instance("knob").flags["max-num-seqs"] == 3
        )
        assert status.last_good_spec is not None and status.last_good_spec.flags["max-num-seqs"] == 3
        facts = parse_startup(sup.recent_lines("knob"))
        assert facts.arg("max_num_seqs") == 3  # the last run's non-default args (the lines are in order)
        record = RunStore().load(session, "knob")
        assert record is not None and record.flags["max-num-seqs"] == 3

        # 2. A value above the model's limit: vLLM's wording, a diagnosis with a fix.
        bad = status.spec.with_flags({"max-model-len": 1_000_000})
        await sup.restart("knob", bad)
        state = (await sup.wait_settled(["knob"], timeout=30))["knob"]
        assert state in (State.FAILED, State.CRASHED)
        status = _status(sup, "knob")
        assert status.last_error is not None
        assert (
            "User-specified max_model_len (1000000) is greater than the derived max_model_len"
            in status.last_error
        )
        assert status.last_good_spec is not None and status.last_good_spec.flags["max-model-len"] == 4096
        problems = diagnose(sup.recent_lines("knob"))
        kinds = [p.kind for p in problems]
        assert "max_model_len_above_model" in kinds, kinds
        fix = problems[kinds.index("max_model_len_above_model")].fix
        assert fix is not None and fix["max-model-len"] == 40960  # Qwen3-0.6B's max_position_embeddings

        # 3. Rollback to the last good spec.
        await sup.restart("knob", status.last_good_spec)
        assert (await sup.wait_settled(["knob"], timeout=30))["knob"] is State.READY
        status = _status(sup, "knob")
        assert status.spec.flags["max-model-len"] == 4096 and status.spec.flags["max-num-seqs"] == 3
        assert_valid_path(rec.states("knob"))
    finally:
        await sup.close(stop_instances=True)
