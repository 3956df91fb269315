"""preflight.gpu_memory_check: vLLM 0.32's start rule (free >= ceil(utilization × total)) on injected GPU
samples, the holders named by pid and instance, the forced start, and the simulated registry's sample."""

from __future__ import annotations

import os
import subprocess
import sys

from vtui.core.model import InstanceSpec
from vtui.sim.gpus import GpuRegistry
from vtui.sim.gpuview import SimulatedGpus
from vtui.supervisor.preflight import gpu_memory_check, instance_gpu_indices
from vtui.telemetry.gpu import NO_DRIVER, GpuInfo, GpuProcess, GpuSample

GIB = 1 << 30


def sample(used: dict[int, int], procs: list[GpuProcess], total: int = 80 * GIB) -> GpuSample:
    gpus = tuple(GpuInfo(i, "H100", used.get(i, 0), total, None, None, None, None) for i in range(4))
    return GpuSample(True, None, gpus, tuple(procs), 0.0)


def spec(**kw) -> InstanceSpec:
    return InstanceSpec(**{"name": "new", "model": "m", "port": 8000, **kw})


def test_enough_free_memory_passes_and_vllm_rule_is_ceil_of_utilization_times_total():
    s = sample({0: 6 * GIB}, [GpuProcess(0, 11, 6 * GIB, "other")])  # 74 GiB free, 0.92 × 80 = 73.6 asked
    assert gpu_memory_check(spec(gpus=(0,)), s).problems == []
    s = sample({0: int(6.5 * GIB)}, [GpuProcess(0, 11, int(6.5 * GIB), "other")])  # 73.5 < 73.6
    (line,) = gpu_memory_check(spec(gpus=(0,)), s).problems
    assert line == (
        'instance "new": GPU 0 has 73.50 GiB free of 80.00 GiB, less than gpu-memory-utilization 0.92 asks '
        "(73.60 GiB); held by pid 11 (instance 'other', 6.50 GiB); stop them, lower gpu-memory-utilization, "
        "or force the start"
    )


def test_holders_named_by_pid_and_instance_on_each_short_gpu_and_force_warns():
    procs = [
        GpuProcess(1, 21, 30 * GIB, "qwen"),
        GpuProcess(1, 22, 10 * GIB, None),
        GpuProcess(2, 23, 1 * GIB, None),
    ]
    s = sample({1: 40 * GIB, 2: 1 * GIB}, procs)
    new = spec(gpus=(1, 2, 3), flags={"tensor-parallel-size": 2, "gpu-memory-utilization": 0.55})
    assert instance_gpu_indices(new) == [1, 2]  # TP 2: the first two of its gpus
    result = gpu_memory_check(new, s)
    assert len(result.problems) == 1  # GPU 1: 40 GiB free, 44 asked; GPU 2: 79 free: fine; GPU 3 unused
    assert "GPU 1 has 40.00 GiB free" in result.problems[0] and "(44.00 GiB)" in result.problems[0]
    assert (
        "held by pid 21 (instance 'qwen', 30.00 GiB), pid 22 (not a vtui instance, 10.00 GiB)"
        in (result.problems[0])
    )
    new = spec(gpus=(1,), flags={"gpu-memory-utilization": 0.6})
    forced = gpu_memory_check(new, s, force=True)
    assert forced.problems == [] and forced.warnings[0].endswith("starting anyway (forced)")


def test_the_instances_own_old_tree_does_not_count_and_no_sample_is_a_note():
    s = sample({0: 70 * GIB}, [GpuProcess(0, 31, 70 * GIB, "new")])
    assert gpu_memory_check(spec(), s).problems  # unpinned: GPU 0
    assert gpu_memory_check(spec(), s, ignore_pids=[31]).problems == []  # being swept before the launch
    none = GpuSample(False, NO_DRIVER, (), (), 0.0)
    result = gpu_memory_check(spec(), none)
    assert result.problems == [] and result.notes == [f'instance "new": GPU memory not checked ({NO_DRIVER})']
    unknown = GpuSample(True, None, (GpuInfo(0, "x", None, None, None, None, None, None),), (), 0.0)
    assert gpu_memory_check(spec(), unknown).notes == ['instance "new": GPU 0 memory not known: not checked']


def test_a_sim_instance_is_refused_on_a_simulated_gpu_another_sim_holds(tmp_path):
    registry = GpuRegistry(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        registry.claim(holder.pid, [6], int(0.5 * 80 * GIB))
        view = SimulatedGpus(8, 80.0, registry=registry)({holder.pid: "llama-1b-shared"})
        new = spec(engine="sim", gpus=(6,), flags={"gpu-memory-utilization": 0.6})
        (line,) = gpu_memory_check(new, view).problems
        assert f"held by pid {holder.pid} (instance 'llama-1b-shared', 40.00 GiB)" in line
        new = spec(engine="sim", gpus=(6,), flags={"gpu-memory-utilization": 0.45})  # shares it: fits
        assert gpu_memory_check(new, view).problems == []
    finally:
        holder.kill()
        holder.wait()
    assert os.getpid() not in registry.holders()


def test_the_supervisor_checks_a_sim_on_real_cuda_against_nvml_not_the_simulated_registry(monkeypatch):
    from vtui.core.gpu import GpuSources
    from vtui.core.model import Layout, SessionSpec
    from vtui.sim.gpuview import SIMULATED, SimulatedSource
    from vtui.supervisor import supervisor as supervision

    asked: list[str] = []
    nvml = GpuSample(True, None, (GpuInfo(0, "H200", 0, 140 * GIB, None, None, None, None),), (), 0.0)

    class FakeMachine:
        name = "nvml"

        def sample(self) -> GpuSample:
            asked.append("nvml")
            return nvml

        def close(self) -> None:
            pass

    cuda = spec(name="cuda", engine="sim", gpus=(0,), flags={"sim-device": "cuda"})
    simulated = spec(name="simulated", engine="sim", gpus=(0,), port=8001)
    layout = Layout(SessionSpec("pick"), (cuda, simulated))
    sup = supervision.Supervisor(layout, gpus=GpuSources(FakeMachine(), SimulatedSource(lambda: layout)))
    assert sup._sample_gpus(cuda) is nvml and asked == ["nvml"]
    assert sup._sample_gpus(simulated).reason == SIMULATED and asked == ["nvml"]
