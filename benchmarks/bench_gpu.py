"""GPU acceptance figures on a machine with NVIDIA GPUs: runs the `gpu` tests (which measure: NVML
attribution per instance, vtui vs nvidia-smi, time until a SIGKILLed leader's GPU memory is back, the
shared-GPU outcomes; through the session supervisor: memory kept over a kill -9 of the supervisor and back
after `vtui down`, the dashboard's per-process table against NVML's list, the free-memory refusal before
a launch, sleep/wake memory and times, replicas per GPU) and prints the figures they wrote to
$VTUI_GPU_ARTIFACTS/gpu-figures.json.

    VTUI_GPU_ARTIFACTS=out python benchmarks/bench_gpu.py [--budget SECONDS] [pytest args]

The session-supervisor checks run first (the issue's second wave), then the first wave's. Past
`--budget` seconds pytest is interrupted (SIGINT: the running test's cleanup still runs, then the
summary), and killed 30 s later; the figures written so far are printed either way.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import _smoke

ORDER = (
    "tests/gpu/test_gpu_session.py",
    "tests/gpu/test_gpu_table.py",
    "tests/gpu/test_gpu_preflight.py",
    "tests/gpu/test_gpu_sleep.py",
    "tests/gpu/test_gpu_replicas.py",
    "tests/gpu/test_gpu_dashboard.py",
    "tests/gpu/test_gpu_kill.py",
    "tests/gpu/test_gpu_sharing.py",
    "tests/gpu/test_gpu_pinning.py",
)
# a smoke run: this check alone, dry (VTUI_GPU_DRY=1: tests/gpu/conftest.py's simulated GPU registry)
SMOKE_TEST = "tests/gpu/test_gpu_preflight.py"
SECTIONS = (
    "session_supervisor",
    "gpu_table",
    "free_memory_preflight",
    "sleep_wake",
    "replicas",
    "pinning",
    "tensor_parallel",
    "shared_staggered",
    "shared_greedy_neighbour",
    "shared_at_once",
    "dashboard",
)


def run_pytest(args: list[str], env: dict[str, str], budget: float | None) -> int:
    proc = subprocess.Popen(args, env=env)
    try:
        return proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        print(f"\n== budget of {budget:g} s spent: interrupting the tests", flush=True)
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], add_help=False)
    parser.add_argument("--budget", type=float, default=None, help="seconds the tests may take in all")
    ours, rest = parser.parse_known_args(argv)
    if _smoke.on():
        os.environ["VTUI_GPU_DRY"] = "1"
    out = Path(os.environ.get("VTUI_GPU_ARTIFACTS") or tempfile.mkdtemp(prefix="vtui-gpu-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-figures.json").unlink(missing_ok=True)
    env = dict(os.environ, VTUI_GPU_ARTIFACTS=str(out))
    paths = [p for p in rest if p.startswith("tests")] or (
        [SMOKE_TEST] if _smoke.on() else [p for p in ORDER if Path(p).exists()]
    )
    options = [p for p in rest if not p.startswith("tests")]
    plugins = []
    if env.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):  # then name the plugins the tests need
        plugins = ["-p", "pytest_asyncio.plugin", "-p", "pytest_timeout"]
    command = [sys.executable, "-m", "pytest", *paths, "-m", "gpu", "-v", "-rs", "-p", "no:cacheprovider"]
    code = run_pytest([*command, *plugins, *options], env, ours.budget)
    path = out / "gpu-figures.json"
    figures = json.loads(path.read_text()) if path.exists() else {}
    print("\n== GPU figures ==")
    smi = figures.get("nvidia_smi", {}).get("worst")
    if smi:
        print(
            f"vtui vs nvidia-smi, worst of 5 samples x GPUs: memory.used {smi['memory_used_rel']:.4%}, "
            f"memory.total {smi['memory_total_rel']:.4%}, utilization {smi['utilization_points']:.1f} points"
        )
    kill = figures.get("kill_9")
    if kill:
        print(
            f"kill -9 of the leader: orphan held {kill['held_gib']} GiB, memory back after "
            f"{kill['freed_after_s']} s, left: {kill['processes_left']}"
        )
    for section in SECTIONS:
        if section in figures:
            print(f"{section}: {json.dumps(figures[section], default=str)[:1500]}")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
