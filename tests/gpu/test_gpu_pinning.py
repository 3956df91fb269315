"""On real GPUs: instances pinned through CUDA_VISIBLE_DEVICES hold memory on their own GPU only, NVML's
processes are attributed to the right instance through vtui's process trees (the engine-core child holds
the memory, not the leader), and vtui's GPU figures match nvidia-smi's."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from vtui.core.state import State

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(600)]

LOAD = (
    "import time, torch; a = torch.randn(8192, 8192, device='cuda'); end = time.time() + {secs}\n"
    "while time.time() < end:\n    a = (a @ a).clamp_(-1, 1)\n    torch.cuda.synchronize()\n"
)


def _smi() -> list[tuple[float, float, float]]:
    out = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=memory.used,memory.total,utilization.gpu",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [tuple(float(x) for x in line.split(",")) for line in out.stdout.strip().splitlines()]


def _lines_tail(sup, name: str) -> str:
    return "\n".join(sup.recent_lines(name)[-15:])


async def test_pinned_instances_are_attributed_on_their_own_gpu_and_match_nvidia_smi(two_gpus, gh, figures):
    lay = gh.layout("pin", gh.sim("a", (0,), 0.45), gh.sim("b", (1,), 0.45))
    async with gh.supervising(lay) as sup:
        await sup.start()
        states = await gh.settle(sup)
        assert states == {"a": State.READY, "b": State.READY}, (
            states,
            _lines_tail(sup, "a"),
            _lines_tail(sup, "b"),
        )
        got = gh.sample(sup)
        leaders = {st.name: st.pid for st in sup.status()}
        for name, mine, other in (("a", 0, 1), ("b", 1, 0)):
            on_mine, on_other = gh.held_by(got, name, mine), gh.held_by(got, name, other)
            assert on_mine and not on_other, (name, got.processes)
            assert leaders[name] not in on_mine  # the VLLM::EngineCore child holds it, found through the tree
            assert set(on_mine) <= sup.pids_of(name)
            total = got.gpus[mine].memory_total
            share = sum(on_mine.values()) / total
            assert 0.40 <= share <= 0.47, (name, share)
            figures.record(
                "pinning",
                **{
                    f"{name}_gpu": mine,
                    f"{name}_leader_pid": leaders[name],
                    f"{name}_holder_pids": sorted(on_mine),
                    f"{name}_held_gib": round(sum(on_mine.values()) / gh.GIB, 2),
                    f"{name}_share_of_total": round(share, 4),
                    f"{name}_on_other_gpu_gib": sum(on_other.values()) / gh.GIB,
                },
            )
        unattributed = [p for p in got.processes if p.instance is None]
        figures.record("pinning", unattributed=[(p.gpu_index, p.pid, p.used_memory) for p in unattributed])

        # nvidia-smi vs vtui, with these instances' memory held and a matmul load on GPU 1 (utilization > 0)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="1", CUDA_DEVICE_ORDER="PCI_BUS_ID")
        load = subprocess.Popen([sys.executable, "-c", LOAD.format(secs=12)], env=env)
        try:
            time.sleep(5.0)
            pairs = []
            for _ in range(5):
                mine = gh.sample(sup)
                smi = _smi()
                pairs.append((mine, smi))
                time.sleep(0.3)
        finally:
            load.kill()
            load.wait()
        worst = {"memory_used_rel": 0.0, "memory_total_rel": 0.0, "utilization_points": 0.0}
        rows = []
        for mine, smi in pairs:
            for gpu, (used, total, util) in zip(mine.gpus, smi, strict=True):
                used_mib, total_mib = gpu.memory_used / 2**20, gpu.memory_total / 2**20
                rows.append(
                    (gpu.index, round(used_mib, 1), used, round(total_mib, 1), total, gpu.utilization, util)
                )
                worst["memory_used_rel"] = max(
                    worst["memory_used_rel"], abs(used_mib - used) / max(used, 1.0)
                )
                worst["memory_total_rel"] = max(worst["memory_total_rel"], abs(total_mib - total) / total)
                worst["utilization_points"] = max(worst["utilization_points"], abs(gpu.utilization - util))
        figures.record("nvidia_smi", worst=worst, rows_vtui_vs_smi=rows)
        assert worst["memory_used_rel"] <= 0.01, rows
        assert worst["memory_total_rel"] <= 0.01, rows
        assert worst["utilization_points"] <= 1.0, rows
        assert max(r[5] for r in rows if r[0] == 1) > 50  # the load showed up


async def test_tensor_parallel_instance_holds_its_share_on_each_gpu(two_gpus, gh, figures):
    lay = gh.layout("tp", gh.sim("tp", (0, 1), 0.3))
    async with gh.supervising(lay) as sup:
        await sup.start()
        states = await gh.settle(sup)
        assert states == {"tp": State.READY}, _lines_tail(sup, "tp")
        got = gh.sample(sup)
        per_gpu = [sum(gh.held_by(got, "tp", g).values()) for g in (0, 1)]
        assert all(per_gpu), got.processes
        assert abs(per_gpu[0] - per_gpu[1]) / max(per_gpu) < 0.02, per_gpu
        figures.record(
            "tensor_parallel",
            held_gib=[round(b / gh.GIB, 2) for b in per_gpu],
            holder_pids=sorted(gh.held_by(got, "tp")),
        )
