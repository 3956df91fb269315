"""Without NVML, the GPU panel shows the simulated GPUs that `vtui sim` instances hold memory on."""

from __future__ import annotations

import os
import subprocess
import sys

from vtui.core.gpu import GpuSources
from vtui.sim.gpus import GpuRegistry
from vtui.sim.gpuview import GIB, SimulatedGpus
from vtui.telemetry.gpu import NO_DRIVER, GpuSampler, NvmlSource


class NoDriver:
    """An NVML whose library is missing."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")


def test_registry_holders_become_per_gpu_memory_attributed_to_instances(tmp_path):
    registry = GpuRegistry(tmp_path)
    registry.claim(os.getpid(), [2, 3], 30 * GIB)
    sample = SimulatedGpus(8, 80, registry=registry, clock=lambda: 5.0)({os.getpid(): "qwen"})
    assert sample.available and len(sample.gpus) == 8 and sample.at == 5.0
    assert [g.memory_used for g in sample.gpus] == [0, 0, 30 * GIB, 30 * GIB, 0, 0, 0, 0]
    assert {g.memory_total for g in sample.gpus} == {80 * GIB}
    assert sample.gpus[0].utilization is None and sample.gpus[0].power_w is None  # shown as --
    assert [(p.gpu_index, p.instance) for p in sample.processes] == [(2, "qwen"), (3, "qwen")]


def test_dead_holders_are_forgotten(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    registry = GpuRegistry(tmp_path)
    registry.claim(int(dead.stdout), [0], 10 * GIB)
    sample = SimulatedGpus(2, 80, registry=registry)({})
    assert [g.memory_used for g in sample.gpus] == [0, 0] and sample.processes == ()


def test_sampler_without_a_driver_uses_the_fallback_and_keeps_sampling(tmp_path):
    registry = GpuRegistry(tmp_path)
    registry.claim(os.getpid(), [0], 12 * GIB)
    plain = GpuSampler(lambda s: None, nvml=NoDriver())
    assert plain.sample_once().reason == NO_DRIVER and not plain.sample_once().available
    box = SimulatedGpus(1, 24, registry=registry)

    class Simulated:
        name = "simulated"

        def sample(self):
            return box()

        def close(self):
            pass

    sampler = GpuSampler(
        lambda s: None,
        owners=lambda pids: {os.getpid(): "a"},
        source=GpuSources(NvmlSource(NoDriver()), Simulated()),
    )
    sample = sampler.sample_once()
    assert sample.available and sample.gpus[0].memory_used == 12 * GIB
    assert sample.processes[0].instance == "a"
