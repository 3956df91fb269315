"""On a real GPU: `kill -9` of an instance's leader leaves its `VLLM::EngineCore` child holding the CUDA
memory (as vLLM's does); vtui's crash sweep (stop-and-sweep of the process tree) frees it within 5 s, and
nothing of the instance is left on the GPU."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import pytest

from vtui.core.state import State

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(300)]


async def test_kill_9_of_the_leader_is_swept_and_the_memory_comes_back(gpu_count, gh, figures):
    baseline = gh.sample()
    base_used = baseline.gpus[0].memory_used
    lay = gh.layout("kill", gh.sim("k", (0,), 0.3))
    async with gh.supervising(lay) as sup:
        await sup.start()
        states = await gh.settle(sup)
        assert states == {"k": State.READY}, sup.recent_lines("k")[-15:]
        leader = sup.status()[0].pid
        got = gh.sample(sup)
        holders = gh.held_by(got, "k", 0)
        assert holders and leader not in holders, got.processes
        held = sum(holders.values())
        tree = sup.pids_of("k")

        os.kill(leader, signal.SIGKILL)
        t0 = time.monotonic()
        await asyncio.sleep(0.05)
        orphans_alive = [p for p in holders if _alive(p)]

        def freed() -> bool:
            now = gh.sample()
            on_gpu = {p.pid for p in now.processes_on(0)}
            return not (on_gpu & tree) and now.gpus[0].memory_used <= base_used + 512 * 2**20

        freed_after = None
        while time.monotonic() - t0 < 15.0:
            if await asyncio.to_thread(freed):
                freed_after = time.monotonic() - t0
                break
            await asyncio.sleep(0.05)
        after = gh.sample()
        left = [p for p in tree if _alive(p)]
        apps = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        on_gpu = [int(line.split(",")[0]) for line in apps.strip().splitlines() if line.strip()]
        state = sup.status()[0].state
        figures.record(
            "kill_9",
            held_gib=round(held / gh.GIB, 2),
            leader_pid=leader,
            holder_pids=sorted(holders),
            orphan_alive_after_kill=bool(orphans_alive),
            freed_after_s=freed_after,
            baseline_used_mib=round(base_used / 2**20),
            after_used_mib=round(after.gpus[0].memory_used / 2**20),
            processes_left=left,
            state=state.value,
            smi_compute_apps_after=on_gpu,
        )
        assert orphans_alive, "the engine-core child should outlive its SIGKILLed leader"
        assert freed_after is not None and freed_after <= 5.0, freed_after
        assert not left and not set(on_gpu) & tree, (left, on_gpu)
        assert state in (State.CRASHED, State.FAILED)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
