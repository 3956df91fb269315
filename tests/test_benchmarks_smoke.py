"""Every script in benchmarks/ runs in its smoke mode and exits 0 (benchmarks/README.md): with
VTUI_BENCH_SMOKE=1 a script runs its default code path on its tiniest input, on vtui's sim (no real vLLM:
VTUI_VLLM is unset and VTUI_TEST_HOME points at an empty folder; no GPU). A script without a smoke mode
fails here: its source must use benchmarks/_smoke.py, and its full run would outlast the timeout.

Each script runs as a subprocess in a temp folder of its own (TMPDIR and the state dirs under it), and
leaves no server behind: a `vllm serve` / `vtui sim` process or an instance process still running under
that folder once the script has exited fails its test (and is killed). The scripts mostly wait (on sims,
tmux, sleeps), so they run a few at a time: all of them are started when the first test asks for its
result, and each test reports its own script."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from _support.procs import kill_all, under_state_dirs

from vtui.supervisor.discovery import kind_of
from vtui.supervisor.launcher import MARKER

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))  # _smoke.py: a helper
AT_ONCE = 3
TIMEOUT_S = 120.0

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("benchmarks-smoke")]


@dataclass
class Run:
    script: str
    code: int | None  # None: killed at the timeout
    seconds: float
    output: str
    left: list[str]  # servers and instance processes still running once the script had exited


def run_smoke(script: str, folder: Path) -> Run:
    env = {
        k: v for k, v in os.environ.items() if k not in ("VTUI_VLLM", "VTUI_TINY_MODEL", "VTUI_REQUIRE_VLLM")
    }
    env.update(
        VTUI_BENCH_SMOKE="1",
        TMPDIR=str(folder),
        VTUI_TEST_HOME=str(folder / "no-test-home"),
        VTUI_STATE_DIR=str(folder / "state"),
        VTUI_CONFIG_DIR=str(folder / "config"),
        XDG_CACHE_HOME=str(folder / "cache"),
    )
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(BENCHMARKS / script)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    code: int | None
    try:
        output, _ = proc.communicate(timeout=TIMEOUT_S)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        code = None
    seconds = time.monotonic() - started
    time.sleep(0.5)  # a server told to stop as the script ended: its last moments
    found = under_state_dirs(str(folder))
    left = [
        f"{p.pid} {' '.join(p.cmdline())[:100]}" for p, env in found if MARKER in env or kind_of(p.cmdline())
    ]
    kill_all([p for p, _ in found])  # idle session supervisors too (they would leave on their own)
    return Run(script, code, seconds, output, left)


@pytest.fixture(scope="module")
def smoke_runs(
    request: pytest.FixtureRequest,
) -> dict[str, Future[Run]]:
    """The selected scripts' smoke runs, AT_ONCE at a time, started together."""
    selected = [
        item.callspec.params["script"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    ]
    pool = ThreadPoolExecutor(AT_ONCE)
    request.addfinalizer(pool.shutdown)
    # Short folders in /tmp, not pytest's (under xdist: /tmp/pytest-of-USER/pytest-N/popen-gwN/NAME0): the
    # scripts' sessions put Unix sockets below them, and a socket path has at most 107 bytes (bench_hosts'
    # forwarded sockets went over it under xdist, and its dashboard waited for hosts that never came).
    folders = {s: Path(tempfile.mkdtemp(prefix=f"vsm-{Path(s).stem[:12]}-")) for s in selected}
    request.addfinalizer(lambda: [shutil.rmtree(f, ignore_errors=True) for f in folders.values()])
    return {s: pool.submit(run_smoke, s, folders[s]) for s in selected}


def test_every_script_is_found() -> None:
    assert len(SCRIPTS) >= 30 and "bench_planner_vs_sim.py" in SCRIPTS, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_in_smoke_mode(script: str, smoke_runs: dict[str, Future[Run]]) -> None:
    source = (BENCHMARKS / script).read_text()
    assert "_smoke" in source, f"{script} has no smoke mode (benchmarks/_smoke.py, benchmarks/README.md)"
    run = smoke_runs[script].result()
    tail = run.output[-4000:]
    assert run.code is not None, f"{script}: still running after {TIMEOUT_S:g} s in smoke mode\n{tail}"
    assert run.code == 0, f"{script}: exit {run.code} in smoke mode after {run.seconds:.1f} s\n{tail}"
    assert not run.left, f"{script} left servers running: {run.left}"
