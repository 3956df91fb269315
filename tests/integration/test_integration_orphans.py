"""Orphans: a sim with a `VLLM::EngineCore` child is killed with SIGKILL; the child outlives its leader
(as vLLM's does), the supervisor sees the crash, sweeps the orphan before relaunching per policy, and a
full stop leaves no process of the instance."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from vtui.core.events import Notice, StateChanged
from vtui.core.state import State
from vtui.layouts import load_layout
from vtui.sim.memory import GpuRegistry
from vtui.supervisor.launcher import MARKER

from .conftest import (
    Recorder,
    alive,
    assert_valid_path,
    marked,
    sim_instance,
    supervisor,
    until,
    write_layout,
)

pytestmark = pytest.mark.timeout(60)


def _engine_cores(pid: int) -> list[psutil.Process]:
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in kids if "VLLM::" in _title(p)]


def _title(proc: psutil.Process) -> str:
    try:
        return f"{proc.name()} {' '.join(proc.cmdline())}"
    except psutil.Error:
        return ""


def _vllm_named(key: str) -> list[psutil.Process]:
    """Live processes titled VLLM:: that carry this instance's marker."""
    found = []
    for proc in psutil.process_iter():
        try:
            if (
                "VLLM::" in _title(proc)
                and proc.status() != psutil.STATUS_ZOMBIE
                and proc.environ().get(MARKER) == key
            ):
                found.append(proc)
        except psutil.Error:
            pass
    return found


async def test_kill9_leaves_an_orphan_that_is_swept_before_the_restart(tmp_path: Path, session: str) -> None:
    layout = load_layout(
        write_layout(
            tmp_path,
            session,
            [
                # 0.45: the swept orphan may linger as a zombie (PID 1 here reaps late); the sim's registry no
                # longer counts a zombie's memory (test below), and two halves would fit either way.
                sim_instance(
                    "engine",
                    gpus=(0,),
                    max_restarts=2,
                    backoff=0.2,
                    sim_engine_child=True,
                    gpu_memory_utilization=0.45,
                )
            ],
        )
    )
    assert layout.instance("engine").flags["sim-engine-child"] is True
    sup = supervisor(layout)
    rec = Recorder(sup)
    try:
        await sup.start()
        assert (await sup.wait_settled(timeout=30))["engine"] is State.READY
        leader = sup.status()[0].pid
        assert leader is not None
        children = _engine_cores(leader)
        assert len(children) == 1, [_title(p) for p in psutil.Process(leader).children(recursive=True)]
        child = children[0]
        assert child.pid in sup.pids_of("engine")
        orphan_alive_at_relaunch: list[bool] = []
        sup.subscribe(
            lambda e: (
                orphan_alive_at_relaunch.append(alive(child.pid))
                if isinstance(e, StateChanged) and e.new is State.STARTING
                else None
            )
        )

        os.kill(leader, signal.SIGKILL)
        # Synchronous on purpose: the supervisor's loop cannot run (and sweep) until we await.
        end = time.monotonic() + 5
        while alive(leader):
            assert time.monotonic() < end, "the leader outlived SIGKILL"
            time.sleep(0.02)
        assert alive(child.pid), "the VLLM::EngineCore child died with its leader (it must outlive it)"

        await until(lambda: any(e.new is State.CRASHED for e in rec.states("engine")), 10, "CRASHED")
        crashed = next(e for e in rec.states("engine") if e.new is State.CRASHED)
        assert crashed.reason is not None and "SIGKILL" in crashed.reason
        await until(lambda: not alive(child.pid), 30, "the orphan sweep")  # a loaded CI machine: seconds
        await until(
            lambda: sup.status()[0].state is State.READY and sup.status()[0].pid not in (None, leader),
            20,
            "the policy restart",
        )
        status = sup.status()[0]
        assert status.restarts == 1, [(e.new, e.reason) for e in rec.states("engine")]
        new_children = _engine_cores(status.pid)
        assert len(new_children) == 1 and new_children[0].pid != child.pid
        assert orphan_alive_at_relaunch == [False], "the relaunch did not wait for the orphan sweep"
        assert [e.new for e in rec.states("engine")] == [
            State.STARTING,
            State.READY,
            State.CRASHED,
            State.BACKOFF,
            State.STARTING,
            State.READY,
        ]
        assert_valid_path(rec.states("engine"))
    finally:
        await sup.close(stop_instances=True)
    assert not _vllm_named(f"{session}/engine")
    assert not marked(session + "/")
    assert rec.states("engine")[-1].new is State.STOPPED


def test_sim_registry_forgets_a_zombie_holder(tmp_path: Path) -> None:
    """A killed orphan whose parent is PID 1 stays a zombie until PID 1 reaps it (late, in a container):
    it holds no GPU memory, so a relaunch after the sweep must not see its claim."""
    env = {**os.environ, "VTUI_SIM_GPU_DIR": str(tmp_path)}
    code = (
        "import os; from vtui.sim.memory import GpuRegistry; GpuRegistry().claim(os.getpid(), [0], 10 << 30)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)  # not reaped until the end: a zombie
    try:
        end = time.monotonic() + 10
        while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < end, "the holder did not exit"
            time.sleep(0.02)
        assert (tmp_path / f"{proc.pid}.json").exists()
        assert GpuRegistry(tmp_path).used(0) == 0, "a zombie still holds simulated GPU memory"
    finally:
        proc.wait()


async def test_sweep_notices_name_the_orphans_they_ended(tmp_path: Path, session: str) -> None:
    layout = load_layout(
        write_layout(
            tmp_path,
            session,
            [
                sim_instance(
                    "engine", gpus=(0,), restart="never", sim_engine_child=True, gpu_memory_utilization=0.45
                )
            ],
        )
    )
    sup = supervisor(layout)
    notices: list[str] = []
    sup.subscribe(lambda e: notices.append(e.text) if isinstance(e, Notice) else None)
    try:
        await sup.start()
        assert (await sup.wait_settled(timeout=30))["engine"] is State.READY
        leader = sup.status()[0].pid
        assert leader is not None
        child = _engine_cores(leader)[0]
        os.kill(leader, signal.SIGKILL)
        await until(lambda: not alive(child.pid), 30, "the orphan sweep")  # a loaded CI machine: seconds
        await until(
            lambda: any(str(child.pid) in text for text in notices),
            2,
            f"a notice naming orphan {child.pid} (got {notices})",
        )
    finally:
        await sup.close(stop_instances=True)
