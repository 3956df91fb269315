"""`vtui tune` end to end on the sim: it finds flags meeting a TTFT SLO that beat the starting ones (and
saves them, comments kept); the planner rules out a region without a restart; a configuration that
fails to start is recorded with its diagnosis; Ctrl-C leaves the tune running in the supervisor, or
cancels it (original flags back) with --cancel-on-interrupt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import vtui, write_layout

pytestmark = pytest.mark.slow
QUICK = ["--num-requests", "24", "--input-len", "128", "--output-len", "8", "--warmup", "1"]


def flags_of(layout: Path, name: str) -> dict:
    result = vtui("ps", str(layout), "--json")
    assert result.returncode == 0, result.stderr
    return next(r for r in json.loads(result.stdout) if r["name"] == name)["flags"]


def up(layout: Path) -> None:
    result = vtui("up", str(layout))
    assert result.returncode == 0, result.stdout + result.stderr


def test_tune_meets_the_ttft_slo_and_beats_the_start(tmp_path: Path) -> None:
    layout = write_layout(tmp_path, [("a", {"max-num-seqs": 2})])
    up(layout)
    result = vtui(
        "tune",
        str(layout),
        "a",
        "--concurrency",
        "8",
        "--ttft-p95-ms",
        "150",
        "--max-trials",
        "8",
        "--save",
        "--json",
        *QUICK,
        timeout=400,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) >= {"baseline", "trials", "best", "restarts"}
    best, base = doc["best"], doc["baseline"]
    assert best["meets_slo"] and best["ttft_p95_ms"] <= 150
    assert best["goodput_rps"] > base["goodput_rps"]
    assert best["flags"]["max-num-seqs"] > 2 and base["flags"]["max-num-seqs"] == 2
    launched = sum(t["measurements"] for t in doc["trials"] if t["launched"])
    assert 0 < doc["restarts"] <= launched + 1  # the baseline runs already; +1: the final apply
    running = flags_of(layout, "a")
    assert all(running[k] == v for k, v in best["flags"].items() if k in running)
    text = layout.read_text()
    assert "# kept by a save" in text and f"max-num-seqs = {best['flags']['max-num-seqs']}" in text
    report = json.loads(Path(doc["report"]).read_text())
    assert report["best"] == best and Path(doc["report"]).with_suffix(".txt").exists()
    baseline = json.loads(Path(doc["baseline_file"]).read_text())
    assert (
        baseline["kind"] == "vtui-baseline"
        and baseline["flags"]["max-num-seqs"] == best["flags"]["max-num-seqs"]
    )


def test_the_planner_prunes_a_region_without_restarts(tmp_path: Path) -> None:
    # a 2 GiB simulated GPU: the KV cache holds a few of the workload's requests, so large max-num-seqs
    # are ruled out from the plan
    layout = write_layout(tmp_path, [("a", {"max-num-seqs": 4, "sim-gpu-memory-gib": 2})])
    up(layout)
    dry = vtui("tune", str(layout), "a", "--concurrency", "64", "--input-len", "512", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    plan = json.loads(dry.stdout)
    ruled_out = [r for r in plan["configurations"] if not r["launch"]]
    assert any("far below max-num-seqs" in r["why_not"] for r in ruled_out)
    assert any("cannot hold one request" in r["why_not"] for r in ruled_out)  # utilization 0.8 of 2 GiB
    assert flags_of(layout, "a")["max-num-seqs"] == 4  # a dry run restarts nothing
    result = vtui(
        "tune",
        str(layout),
        "a",
        "--concurrency",
        "64",
        "--max-trials",
        "4",
        "--json",
        "--num-requests",
        "16",
        "--input-len",
        "512",
        "--output-len",
        "8",
        "--warmup",
        "0",
        timeout=400,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    pruned = [t for t in doc["trials"] if not t["launched"]]
    assert pruned and all(t["scored_from"] == "plan" and t["measurement"] is None for t in pruned)
    launched = sum(t["measurements"] for t in doc["trials"] if t["launched"])
    assert doc["restarts"] <= launched + 1
    # the supervisor's flag history: one entry per start; none ran a configuration scored from the plan
    from vtui.commands._runs import connect

    history = connect([str(layout), "a"], command="tune").status()["flag_history"]["a"]
    assert len(history) == 1 + doc["restarts"]  # `vtui up`, then the tune's restarts
    for entry in history:
        for trial in pruned:
            assert not all(entry["flags"].get(k) == v for k, v in trial["changed"].items()), (entry, trial)


def test_a_failed_start_is_recorded_with_its_diagnosis(tmp_path: Path) -> None:
    from vtui.bench import BenchConfig
    from vtui.commands._runs import connect
    from vtui.tune import Objective, Search, build_space, start_config
    from vtui.tune.runner import SupervisorRunner, running_flags

    # another tenant holds half of GPU 0: utilization 0.8 for "a" cannot start, the planner cannot know
    layout = write_layout(
        tmp_path, [("other", {"gpu-memory-utilization": 0.5}), ("a", {"gpu-memory-utilization": 0.4})]
    )
    up(layout)
    session = connect([str(layout), "a"], command="tune")
    flags = running_flags(session.client, "a")
    space = build_space(flags, required_context=2048, model_max_len=None, concurrency=4)
    url = next(i for i in session.status()["instances"] if i["name"] == "a")["spec"]["port"]
    runner = SupervisorRunner(
        session.client, "a", BenchConfig(f"http://127.0.0.1:{url}", num_requests=4, output_len=4), defaults={}
    )
    search = Search(space, start_config(flags, space, {}), runner, Objective())
    failed = search.evaluate(search.start.with_(gpu_memory_utilization=0.8), "fit")
    assert failed.launched and failed.infeasible.startswith("failed to start")
    assert failed.diagnosis and failed.diagnosis[0]["kind"], failed
    assert runner.restarts == 1
    beyond = search.evaluate(search.start.with_(gpu_memory_utilization=0.9), "fit")
    assert not beyond.launched and "failed to start" in beyond.infeasible and runner.restarts == 1
    runner.apply(flags, exact=True)
    assert running_flags(session.client, "a") == flags


def test_ctrl_c_leaves_the_tune_running_or_cancels_it_with_the_flag(tmp_path: Path) -> None:
    layout = write_layout(tmp_path, [("a", {"max-num-seqs": 2})])
    up(layout)
    original = flags_of(layout, "a")

    def interrupted(*extra: str) -> tuple[int, str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vtui", "tune", str(layout), "a", "--concurrency", "8", *QUICK, *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
            # as a terminal's Ctrl-C finds it: a suite started in the background (`cmd &`) inherits
            # SIGINT ignored, and Python then installs no KeyboardInterrupt handler in the child
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        seen = []
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            seen.append(line)
            if line.startswith("trial 1 "):  # a restart done: the instance runs other flags now
                break
            assert line or proc.poll() is None, "".join(seen)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        return proc.returncode, "".join(seen) + err

    code, err = interrupted()  # Ctrl-C: the client goes, the tune runs on in the supervisor
    assert code == 130 and "runs on in the session supervisor" in err, err
    attach = vtui("tune", str(layout), "a", "--attach", "--json", timeout=400)
    assert attach.returncode == 0, attach.stdout + attach.stderr
    assert "verdict" in json.loads(attach.stdout)
    code, err = interrupted("--cancel-on-interrupt", "--max-trials", "12", "--num-requests", "96")
    assert code == 130 and "cancelling the tune" in err, err
    now = flags_of(layout, "a")
    applied = json.loads(attach.stdout)
    expected = applied["final_flags"] if applied["applied"] else original
    assert now == expected  # the cancelled tune put back the flags it started from


def test_bad_input_exits_2_with_a_clear_line(tmp_path: Path) -> None:
    layout = write_layout(tmp_path, [("a", {})])
    missing = vtui("tune", str(layout), "nope", "--dry-run")
    assert missing.returncode == 2 and "no instance named nope" in missing.stderr
    bad_fix = vtui("tune", str(layout), "a", "--fix", "max-num-seqs=many", "--dry-run")
    assert bad_fix.returncode == 2 and "max-num-seqs" in bad_fix.stderr and "Traceback" not in bad_fix.stderr
