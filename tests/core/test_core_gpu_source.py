"""One GPU source: every consumer of "which GPUs does this instance see, and how much is free there" built
on the simulated box and on a fake NVML holding the same memory, answering alike: preflight's presence
check, the supervisor's check before a launch, replica placement, the planner's GPU size, the GPU panel's
sample and the sim's own start check."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from vtui.core.gpu import (
    FallbackSource,
    FedSource,
    GpuSample,
    GpuSources,
    UnavailableSource,
    instance_gpus,
)
from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.sim.gpus import GpuRegistry
from vtui.sim.gpuview import SimulatedSource, registry_free
from vtui.supervisor.preflight import gpu_memory_check, preflight
from vtui.supervisor.supervisor import Supervisor
from vtui.telemetry.gpu import GpuSampler, NvmlSource
from vtui.ui.planning import gpu_memory_gib

from .conftest import free_port

GIB = 1 << 30
COUNT = 4
SIZE = 80 * GIB


class FakeNvml:
    """pynvml over `held`: {gpu: [(pid, bytes)]} on COUNT GPUs of SIZE bytes."""

    class NVMLError(Exception):
        pass

    def __init__(self, held: dict[int, list[tuple[int, int]]]) -> None:
        self.held = held

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return COUNT

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "H100"

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> SimpleNamespace:
        used = sum(n for _, n in self.held.get(h, ()))
        return SimpleNamespace(used=used, total=SIZE)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=n) for pid, n in self.held.get(h, ())]

    def __getattr__(self, name: str):
        def unsupported(*_a, **_kw):
            raise self.NVMLError(f"{name}: not supported")

        return unsupported


@pytest.fixture
def holder():
    """A live process holding memory (the registry drops dead pids)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def sources(kind: str, tmp_path, holder: int, engine: str) -> tuple[GpuSources, Layout, list[InstanceSpec]]:
    """A layout of `engine` instances and the sources it runs on: GPU 0 has 60 GiB held by `holder`,
    GPU 2 10 GiB by this process; GPUs 1 and 3 are free."""
    held = {0: [(holder, 60 * GIB)], 2: [(os.getpid(), 10 * GIB)]}
    flags = {"sim-num-gpus": COUNT, "sim-gpu-memory-gib": SIZE // GIB} if engine == "sim" else {}
    specs = [
        InstanceSpec(
            name=f"i{g}", model="Qwen/Qwen3-0.6B", port=free_port(), engine=engine, gpus=(g,), flags=flags
        )
        for g in range(COUNT)
    ]
    layout = Layout(SessionSpec(name="agree"), tuple(specs))
    if kind == "simulated":
        registry = GpuRegistry()  # $VTUI_SIM_GPU_DIR: the test's own
        for gpu, pids in held.items():
            for pid, nbytes in pids:
                registry.claim(pid, [gpu], nbytes)
        simulated = SimulatedSource(lambda: layout)
        machine = NvmlSource(NoDriver())
    else:
        simulated = SimulatedSource(lambda: layout)
        machine = NvmlSource(FakeNvml(held))
    return GpuSources(machine, simulated), layout, specs


class NoDriver:
    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        raise self.NVMLError("Driver Not Loaded")


@pytest.mark.parametrize("kind,engine", [("simulated", "sim"), ("nvml", "vllm")])
def test_every_consumer_agrees_on_each_source(kind, engine, tmp_path, holder, monkeypatch) -> None:
    monkeypatch.setenv("VTUI_SIM_GPU_DIR", str(tmp_path / "sim-gpus"))
    gpus, layout, specs = sources(kind, tmp_path, holder, engine)
    expected_free = {0: 20 * GIB, 1: SIZE, 2: 70 * GIB, 3: SIZE}

    # the one rule
    views = {s.name: instance_gpus(s, gpus) for s in specs}
    assert all(v.available for v in views.values()), {n: v.reason for n, v in views.items()}
    assert {v.indices[0]: v.free[v.indices[0]] for v in views.values()} == expected_free

    # preflight: GPUs present on the source the instances run on, no "GPU checks skipped"
    missing = InstanceSpec(
        name="far", model="m", port=free_port(), engine=engine, gpus=(7,), flags=specs[0].flags
    )
    far = Layout(layout.session, (*layout.instances, missing))
    result = preflight(far, ["far", "i1"], gpus=gpus, cpu_count=64)
    assert not any("skipped" in n for n in result.notes), result.notes
    assert [p for p in result.problems if "not present" in p] == [
        f'instance "far": GPU 7 not present ({"the simulated box" if kind == "simulated" else "this machine"} '
        "has GPUs 0-3)"
    ]

    # the supervisor's check just before a launch: refused on GPU 0 (20 GiB free < 0.9 × 80), fine on 1
    sup = Supervisor(layout, gpus=gpus, check_preflight=True)
    for spec in specs:
        check = gpu_memory_check(spec.with_flags({"gpu-memory-utilization": 0.9}), sup._sample_gpus(spec))
        assert bool(check.problems) == (expected_free[spec.gpus[0]] < 0.9 * SIZE), (spec.name, check)

    # replica placement: the free memory of every GPU
    assert sup._free_memory(layout, specs[0]) == expected_free

    # the planner's GPU size
    for spec in specs:
        assert gpu_memory_gib(spec, layout.session, gpus.panel()) == SIZE / GIB

    # the GPU panel (the session's sampler): the same used memory per GPU, the holder named by pid
    panel = GpuSampler(lambda s: None, source=gpus, owners=lambda pids: {holder: "i0"}).sample_once()
    assert {g.index: g.memory_total - g.memory_used for g in panel.gpus} == expected_free
    assert {(p.gpu_index, p.pid, p.instance) for p in panel.processes} == {
        (0, holder, "i0"),
        (2, os.getpid(), None),
    }

    # the sim's own start check (simulated box only: a sim on real CUDA asks the device itself)
    if kind == "simulated":
        registry = GpuRegistry()
        for gpu, free in expected_free.items():
            assert registry_free(registry, [gpu], SIZE, owner=-1) == free
        # the asking sim's own claim counts as free
        assert registry_free(registry, [2], SIZE, owner=os.getpid()) == SIZE


def test_an_instance_never_sees_the_other_kind_of_gpus() -> None:
    """A real vLLM is not checked against simulated GPUs, nor a simulated-box sim against NVML's."""
    sim = InstanceSpec(name="s", model="m", port=1, engine="sim", gpus=(0,))
    cuda_sim = InstanceSpec(
        name="c", model="m", port=2, engine="sim", gpus=(0,), flags={"sim-device": "cuda"}
    )
    vllm = InstanceSpec(name="v", model="m", port=3, gpus=(0,))
    from vtui.core.gpu import GpuInfo

    real = GpuSample(True, None, (GpuInfo(0, "H100", 0, SIZE, None, None, None, None),), (), 0.0, "nvml")
    fake = GpuSample(
        True, "simulated", (GpuInfo(0, "SIM", 0, SIZE, None, None, None, None),), (), 0.0, "simulated"
    )
    assert instance_gpus(vllm, real).available and instance_gpus(cuda_sim, real).available
    assert not instance_gpus(sim, real).available
    assert instance_gpus(sim, fake).available and not instance_gpus(vllm, fake).available
    feed = FedSource()
    assert not feed.sample().available
    feed.update(real)
    both = GpuSources(feed, FedSource())
    assert both.for_instance(vllm) is feed and both.for_instance(cuda_sim) is feed
    assert both.for_instance(sim) is both.simulated


def test_fallback_takes_the_first_available_source() -> None:
    from vtui.core.gpu import NO_DRIVER

    none = UnavailableSource(NO_DRIVER)
    later = FedSource()
    chain = FallbackSource(none, later)
    assert chain.sample().reason == NO_DRIVER
    got = GpuSample(True, None, (), (), 1.0, "amdsmi")
    later.update(got)
    assert chain.sample() is got and chain.name == "remote"
