"""A tune that outlives its terminal, on the sim: it runs in the session supervisor, so `--detach`
returns at once and it goes on to the end; `--cancel` (the tune screen's ctrl+x) puts the original
flags back; a tune whose supervisor was `kill -9`ed is refused a fresh start, continues with `--resume`
from its recorded trials without re-running them, or `--restore` puts its original flags back."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from vtui.layouts import load_layout
from vtui.tune import progress

from .conftest import QUICK, instance_row, vtui, write_layout

pytestmark = pytest.mark.slow


def start(tmp_path: Path, *extra: str) -> tuple[Path, dict, dict]:
    layout = write_layout(tmp_path, [("a", {"max-num-seqs": 2})])
    result = vtui("up", str(layout))
    assert result.returncode == 0, result.stdout + result.stderr
    original = instance_row(layout)["flags"]
    result = vtui("tune", str(layout), "a", "--detach", "--json", *QUICK, *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    info = json.loads(result.stdout)  # {instance, session, progress}
    return layout, info, original


def wait_for(info: dict, check, timeout: float = 240.0) -> dict:
    deadline = time.monotonic() + timeout
    doc = None
    while time.monotonic() < deadline:
        doc = progress.read(Path(info["progress"]))
        if doc is not None and check(doc):
            return doc
        time.sleep(0.3)
    raise AssertionError(f"progress never got there: {json.dumps(doc)[:2000]}")


def launched(doc: dict) -> int:
    return sum(1 for t in doc["trials"] if t["launched"])


def test_a_detached_tune_runs_on_in_the_supervisor_to_the_end(tmp_path: Path) -> None:
    layout, info, original = start(tmp_path, "--max-trials", "4")
    second = vtui("tune", str(layout), "a", "--detach", *QUICK)
    assert second.returncode == 2 and "running" in second.stderr, second.stdout + second.stderr
    running = wait_for(info, lambda d: d["current"] is not None)
    assert running["state"] == "running" and progress.live_state(running) == "running"
    assert running["job"] == "supervisor" and running["pid"] == instance_row(layout)["supervisor_pid"]
    assert running["original"] == original
    assert not progress.abort(running)  # never a signal to the supervisor: --cancel asks it
    doc = wait_for(info, lambda d: d["state"] != "running")
    assert doc["state"] == "done", doc
    assert doc["best"]["meets_slo"] and doc["best"]["goodput_rps"] > doc["baseline"]["goodput_rps"]


def test_cancel_puts_the_original_flags_back(tmp_path: Path) -> None:
    layout, info, original = start(tmp_path)
    wait_for(info, lambda d: launched(d) >= 2)
    assert instance_row(layout)["flags"] != original  # a trial's flags run now
    cancel = vtui("tune", str(layout), "a", "--cancel", "--detach")
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    doc = wait_for(info, lambda d: d["state"] != "running", timeout=120)
    assert doc["state"] == "aborted" and "original flags restored" in doc["message"], doc
    assert instance_row(layout)["flags"] == original


def kill_supervisor_mid_tune(tmp_path: Path, *extra: str) -> tuple[Path, dict, dict]:
    layout, info, original = start(tmp_path, *extra)
    wait_for(info, lambda d: launched(d) >= 2 and (d["current"] or {}).get("phase") == "benchmarking")
    os.kill(instance_row(layout)["supervisor_pid"], signal.SIGKILL)  # the tune dies with it
    time.sleep(0.5)
    doc = progress.read(Path(info["progress"]))
    assert doc is not None and progress.live_state(doc) == "interrupted"
    return layout, info, original


def test_a_tune_whose_supervisor_was_killed_resumes_from_its_recorded_trials(tmp_path: Path) -> None:
    layout, info, original = kill_supervisor_mid_tune(tmp_path, "--max-trials", "5")
    doc = progress.read(Path(info["progress"]))
    recorded = [(t["changed"], t["launched"]) for t in doc["trials"]]
    fresh = vtui("tune", str(layout), "a", *QUICK)
    assert fresh.returncode == 2 and "--resume" in fresh.stderr and "interrupted" in fresh.stderr
    result = vtui("tune", str(layout), "a", "--resume", "--json", timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout)
    assert [(t["changed"], t["launched"]) for t in out["trials"][: len(recorded)]] == recorded
    assert out["replayed"] >= sum(1 for _, was_launched in recorded if was_launched)
    assert sum(1 for t in out["trials"] if t["launched"]) <= 5
    final = progress.read(Path(info["progress"]))
    assert final["state"] == "done" and final["resumed"] == 1 and final["original"] == original


def test_restore_puts_back_what_a_killed_supervisor_left(tmp_path: Path) -> None:
    layout, info, original = kill_supervisor_mid_tune(tmp_path)
    assert instance_row(layout)["flags"] != original  # re-adopted, on the trial's flags
    result = vtui("tune", str(layout), "a", "--restore")
    assert result.returncode == 0, result.stdout + result.stderr
    assert instance_row(layout)["flags"] == original
    assert progress.read(Path(info["progress"]))["state"] == "aborted"


def test_a_detached_tune_with_save_writes_the_best_into_the_layout(tmp_path: Path) -> None:
    """--save is the supervisor's: a --detach'ed tune that applies its best writes it into the layout
    file when it ends, with no client following (comments kept), and says where in its result."""
    layout, info, original = start(tmp_path, "--max-trials", "4", "--save")
    doc = wait_for(info, lambda d: d["state"] != "running")
    assert doc["state"] == "done", doc
    result = doc["result"]
    assert result["applied"], result  # the quick space's best beats max-num-seqs 2 (the test above)
    assert result["saved_to"] == str(layout) and result["save_problems"] == []
    text = layout.read_text()
    assert "# kept by a save" in text
    saved = load_layout(layout).instance("a").flags
    assert {k: saved.get(k) for k in result["final_flags"]} == result["final_flags"]
    assert result["final_flags"] != original  # the tuned flags, not the starting ones
