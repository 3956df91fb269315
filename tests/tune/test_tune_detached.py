"""A tune that outlives its terminal, on the sim: `--detach` runs it in its own session and it goes on
after the command (the dashboard) has gone; an abort (SIGTERM, as the tune screen sends it) or a
`kill -9` of the session supervisor puts the original flags back; a tune whose process was killed is
refused a fresh start and continues with `--resume` from its recorded trials, without re-running them."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from vtui.tune import progress

from .conftest import vtui, write_layout

pytestmark = pytest.mark.slow
QUICK = [
    "--concurrency",
    "8",
    "--num-requests",
    "24",
    "--input-len",
    "128",
    "--output-len",
    "8",
    "--warmup",
    "1",
    "--ttft-p95-ms",
    "150",
]


def ps(layout: Path) -> dict:
    result = vtui("ps", str(layout), "--json")
    assert result.returncode == 0, result.stderr
    return next(r for r in json.loads(result.stdout) if r["name"] == "a")


def start(tmp_path: Path, *extra: str) -> tuple[Path, dict, dict]:
    layout = write_layout(tmp_path, [("a", {"max-num-seqs": 2})])
    result = vtui("up", str(layout))
    assert result.returncode == 0, result.stdout + result.stderr
    original = ps(layout)["flags"]
    result = vtui("tune", str(layout), "a", "--detach", "--json", *QUICK, *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    info = json.loads(result.stdout)
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


def test_a_detached_tune_runs_on_in_its_own_session_to_the_end(tmp_path: Path) -> None:
    layout, info, original = start(tmp_path, "--max-trials", "4")
    pid = info["pid"]
    assert os.getsid(pid) == pid  # its own session: no terminal's hangup reaches it
    second = vtui("tune", str(layout), "a", "--detach", *QUICK)
    assert second.returncode == 2 and "running" in second.stderr, second.stdout + second.stderr
    running = wait_for(info, lambda d: d["current"] is not None)
    assert running["state"] == "running" and progress.live_state(running) == "running"
    assert running["original"] == original
    doc = wait_for(info, lambda d: d["state"] != "running")
    assert doc["state"] == "done", doc
    assert doc["best"]["meets_slo"] and doc["best"]["goodput_rps"] > doc["baseline"]["goodput_rps"]
    assert launched(doc) >= 2 and doc["report"] and Path(doc["report"]).exists()
    assert ps(layout)["flags"]["max-num-seqs"] == doc["best"]["flags"]["max-num-seqs"] != 2


def test_abort_puts_the_original_flags_back(tmp_path: Path) -> None:
    layout, info, original = start(tmp_path)
    doc = wait_for(info, lambda d: launched(d) >= 2)
    assert ps(layout)["flags"] != original  # a trial's flags run now
    assert progress.abort(doc)
    doc = wait_for(info, lambda d: d["state"] != "running", timeout=120)
    assert doc["state"] == "aborted" and "original flags restored" in doc["message"], doc
    assert ps(layout)["flags"] == original
    assert not progress.abort(doc)  # nothing runs any more


def test_a_killed_supervisor_mid_tune_gets_the_original_flags_back(tmp_path: Path) -> None:
    layout, info, original = start(tmp_path)
    wait_for(info, lambda d: launched(d) >= 2 and d["current"] is not None)
    supervisor = ps(layout)["supervisor_pid"]
    os.kill(supervisor, signal.SIGKILL)
    doc = wait_for(info, lambda d: d["state"] != "running", timeout=180)
    assert doc["state"] == "failed" and "original flags restored" in doc["message"], doc
    row = ps(layout)  # a new supervisor, which re-adopted the instance
    assert row["supervisor_pid"] != supervisor and row["flags"] == original


def test_a_killed_tune_resumes_from_its_recorded_trials(tmp_path: Path) -> None:
    layout, info, original = start(tmp_path, "--max-trials", "5")
    doc = wait_for(info, lambda d: launched(d) >= 2)
    os.kill(info["pid"], signal.SIGKILL)
    time.sleep(0.5)
    doc = progress.read(Path(info["progress"]))
    assert doc is not None and progress.live_state(doc) == "interrupted"
    recorded = [(t["changed"], t["launched"]) for t in doc["trials"]]
    fresh = vtui("tune", str(layout), "a", *QUICK)
    assert fresh.returncode == 2 and "--resume" in fresh.stderr and "interrupted" in fresh.stderr
    history_before = len(vtui_status(layout)["flag_history"]["a"])
    result = vtui("tune", str(layout), "a", "--resume", "--json", timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout)
    assert [(t["changed"], t["launched"]) for t in out["trials"][: len(recorded)]] == recorded
    assert out["replayed"] >= sum(1 for _, was_launched in recorded if was_launched)
    # the replayed trials cost no restart: only the new ones (and the final apply) do
    new_restarts = len(vtui_status(layout)["flag_history"]["a"]) - history_before
    assert new_restarts <= sum(t["measurements"] for t in out["trials"][len(recorded) :]) + 2
    assert sum(t["measurements"] for t in out["trials"] if t["launched"]) <= 5 + 2
    final = progress.read(Path(info["progress"]))
    assert final["state"] == "done" and final["resumed"] == 1 and final["original"] == original


def test_restore_puts_back_what_a_killed_tune_left(tmp_path: Path) -> None:
    layout, info, original = start(tmp_path)
    wait_for(info, lambda d: launched(d) >= 2 and (d["current"] or {}).get("phase") == "benchmarking")
    os.kill(info["pid"], signal.SIGKILL)  # mid-trial: the instance runs that trial's flags
    time.sleep(0.5)
    assert ps(layout)["flags"] != original
    result = vtui("tune", str(layout), "a", "--restore")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ps(layout)["flags"] == original
    assert progress.read(Path(info["progress"]))["state"] == "aborted"


def vtui_status(layout: Path) -> dict:
    from vtui.commands._runs import connect

    return connect([str(layout), "a"], command="tune").status(refresh=True)
