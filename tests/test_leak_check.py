"""The end-of-run leak check (tests/conftest.py's pytest_sessionfinish, `_support.procs.left_behind`) on
fake process lists: a zombie `VLLM::EngineCore` (state Z: it holds no memory; an init that never reaps
leaves one on the GPU device machine) is named, not a leak; a live one is a leak."""

from __future__ import annotations

import psutil
from _support.procs import ProcessRow, left_behind, process_rows

STARTED = 1000.0
BASE = "/tmp/pytest-of-me/pytest-7"


def row(
    pid: int,
    cmdline: list[str],
    *,
    name: str = "",
    ppid: int = 1,
    status: str = psutil.STATUS_SLEEPING,
    born: float = STARTED + 5,
    state_dir: str = f"{BASE}/vtui-home0/state",
) -> ProcessRow:
    return ProcessRow(
        pid,
        name or (cmdline[0] if cmdline else ""),
        cmdline,
        born,
        ppid,
        status,
        lambda: {"VTUI_STATE_DIR": state_dir},
    )


def test_a_zombie_engine_core_is_named_but_no_leak() -> None:
    # a zombie's cmdline reads empty; its name is the kernel's comm, cut to 15 characters
    zombie = row(4242, [], name="VLLM::EngineCor", status=psutil.STATUS_ZOMBIE)
    leaked, zombies = left_behind([zombie], STARTED, BASE)
    assert leaked == []
    assert zombies == ["4242 VLLM::EngineCor (state Z)"]


def test_live_leftovers_are_leaks_beside_a_zombie() -> None:
    rows = [
        row(4242, [], name="VLLM::EngineCor", status=psutil.STATUS_ZOMBIE),
        row(4243, ["VLLM::EngineCore"]),  # a live orphan: it holds the GPU memory
        row(4244, ["/venv/bin/python", "-m", "vtui.sim", "Qwen/Qwen3-8B", "--port", "9000"], ppid=77),
    ]
    leaked, zombies = left_behind(rows, STARTED, BASE)
    assert leaked == ["4243 VLLM::EngineCore", "4244 /venv/bin/python -m vtui.sim Qwen/Qwen3-8B --port 9000"]
    assert zombies == ["4242 VLLM::EngineCor (state Z)"]


def test_what_is_not_the_runs_is_neither() -> None:
    rows = [
        row(1, ["VLLM::EngineCore"], born=STARTED - 60),  # older than the run
        row(2, ["VLLM::EngineCore"], ppid=500),  # its parent still alive: not orphaned
        row(3, ["vtui", "sim", "m"], state_dir="/home/me/.local/state/vtui"),  # a neighbour's server
        row(4, ["python", "-m", "pytest"]),  # not a server
        row(5, [], name="VLLM::EngineCor", status=psutil.STATUS_ZOMBIE, born=STARTED - 60),
    ]
    assert left_behind(rows, STARTED, BASE) == ([], [])


def test_the_rows_of_this_machine_include_a_child_and_its_environment() -> None:
    """A child of ours, not this process: pytest-xdist retitles its workers (setproctitle), which can
    overwrite the memory /proc/PID/environ reads, so a worker's own environment may read back empty."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "VTUI_LEAK_CHECK_PROBE": "yes"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        mine = next(r for r in process_rows() if r.pid == child.pid)
        assert mine.status != psutil.STATUS_ZOMBIE and mine.create_time > 0
        assert mine.environ().get("VTUI_LEAK_CHECK_PROBE") == "yes"  # read from /proc
    finally:
        child.kill()
        child.wait()
