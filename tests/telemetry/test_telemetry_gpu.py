"""GpuSampler with an injected fake NVML: 1, 2 and 8 GPUs, memory v2 vs v1, fields a GPU does not
report, PIDs mapped to instances ("other" when unmatched), and no driver at all."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from vtui.telemetry.gpu import NO_DRIVER, GpuSampler

GiB = 1024**3


class FakeNvml:
    """The slice of pynvml that vtui uses, over a list of fake devices."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    NVML_TEMPERATURE_GPU = 0
    nvmlMemory_v2 = 0x2000028

    def __init__(
        self,
        gpus: int,
        *,
        init_error: bool = False,
        v2: bool = True,
        unsupported: tuple[str, ...] = (),
        processes: dict[int, list[tuple[int, int | None]]] | None = None,
    ) -> None:
        self.count = gpus
        self.init_error = init_error
        self.v2 = v2
        self.unsupported = unsupported
        self.processes = processes or {}
        self.inits = 0
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.init_error:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def _check(self, what: str) -> None:
        if what in self.unsupported:
            raise self.NVMLError_NotSupported("Not Supported")

    def nvmlDeviceGetName(self, h: int) -> bytes:
        self._check("name")
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> SimpleNamespace:
        if version is not None:
            if not self.v2:
                raise self.NVMLError("Function Not Found")
            return SimpleNamespace(total=80 * GiB, used=10 * GiB + h, free=70 * GiB, reserved=600 * 2**20)
        return SimpleNamespace(total=80 * GiB, used=10 * GiB + 600 * 2**20 + h, free=70 * GiB)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        self._check("util")
        return SimpleNamespace(gpu=50 + h, memory=10)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        self._check("temp")
        return 40 + h

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._check("power")
        return 250_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        self._check("power")
        return 700_000

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self.processes.get(h, [])]


@pytest.mark.parametrize("count", [1, 2, 8])
def test_every_gpu_is_sampled(count: int) -> None:
    nvml = FakeNvml(count)
    sample = GpuSampler(lambda s: None, nvml=nvml, clock=lambda: 123.0).sample_once()
    assert sample.available and sample.reason is None and sample.at == 123.0
    assert [g.index for g in sample.gpus] == list(range(count))
    last = sample.gpus[-1]
    assert last.name == "NVIDIA H100 80GB HBM3"
    assert last.memory_total == 80 * GiB
    assert last.memory_used == 10 * GiB + count - 1  # the v2 figure nvidia-smi shows
    assert (last.utilization, last.temperature) == (50.0 + count - 1, 40.0 + count - 1)
    assert (last.power_w, last.power_limit_w) == (250.0, 700.0)


def test_memory_falls_back_to_v1() -> None:
    sample = GpuSampler(lambda s: None, nvml=FakeNvml(1, v2=False)).sample_once()
    assert sample.gpus[0].memory_used == 10 * GiB + 600 * 2**20


def test_unsupported_fields_are_none() -> None:
    nvml = FakeNvml(2, unsupported=("util", "temp", "power", "name"))
    gpu = GpuSampler(lambda s: None, nvml=nvml).sample_once().gpus[1]
    assert (gpu.name, gpu.utilization, gpu.temperature, gpu.power_w, gpu.power_limit_w) == (None,) * 5
    assert gpu.memory_total == 80 * GiB


def test_processes_are_mapped_to_instances_or_other() -> None:
    nvml = FakeNvml(2, processes={0: [(100, 20 * GiB), (555, 1 * GiB)], 1: [(101, None)]})
    owners = {100: "qwen", 101: "qwen", 200: "llama"}
    sample = GpuSampler(lambda s: None, nvml=nvml, owners=lambda pids: owners).sample_once()
    got = {(p.gpu_index, p.pid): (p.instance, p.used_memory) for p in sample.processes}
    assert got == {(0, 100): ("qwen", 20 * GiB), (0, 555): (None, 1 * GiB), (1, 101): ("qwen", None)}
    assert [p.pid for p in sample.processes_on(0)] == [100, 555]


def test_broken_pid_owner_still_samples() -> None:
    def boom(pids) -> dict[int, str]:
        raise RuntimeError("supervisor gone")

    sample = GpuSampler(lambda s: None, nvml=FakeNvml(1, processes={0: [(7, 1)]}), owners=boom).sample_once()
    assert sample.processes[0].instance is None


def test_no_driver_is_a_state_not_an_error() -> None:
    nvml = FakeNvml(1, init_error=True)
    sampler = GpuSampler(lambda s: None, nvml=nvml)
    first, second = sampler.sample_once(), sampler.sample_once()
    assert (first.available, first.reason, first.gpus) == (False, NO_DRIVER, ())
    assert second.reason == NO_DRIVER and nvml.inits == 1  # not retried every tick


def test_real_pynvml_without_driver_reports_no_driver() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    sample = GpuSampler(lambda s: None).sample_once()
    assert (sample.available, sample.reason) == (False, NO_DRIVER)


def test_zero_gpus() -> None:
    sample = GpuSampler(lambda s: None, nvml=FakeNvml(0)).sample_once()
    assert not sample.available and sample.reason == "no NVIDIA GPU"


def test_thread_posts_samples_and_stops() -> None:
    got = []
    event = threading.Event()

    def on_sample(sample) -> None:
        got.append((threading.current_thread().name, sample))
        if len(got) >= 2:
            event.set()

    nvml = FakeNvml(1)
    sampler = GpuSampler(on_sample, nvml=nvml, interval=0.01)
    sampler.start()
    assert event.wait(2.0)
    sampler.stop()
    assert got[0][0] == "vtui-gpu-sampler" and got[0][1].available
    assert nvml.shutdowns == 1


def test_thread_without_driver_posts_once_and_ends() -> None:
    got = []
    sampler = GpuSampler(got.append, nvml=FakeNvml(1, init_error=True), interval=0.01)
    sampler.start()
    thread = sampler._thread
    assert thread is not None
    thread.join(2.0)
    assert not thread.is_alive()
    assert len(got) == 1 and got[0].reason == NO_DRIVER
    sampler.stop()


def test_processes_carry_their_command_line_read_once() -> None:
    """A real process's command (program as base name, then its arguments) from psutil; a pid that is
    gone has none (`--` in the panel); the command is read once per process, not every sample."""
    import os
    import subprocess
    import sys
    from unittest import mock

    import vtui.telemetry.gpuprocs as gpu_mod

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "vtui-gpu-cmd"])
    try:
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        nvml = FakeNvml(1, processes={0: [(child.pid, 2 * GiB), (gone.pid, 1 * GiB)]})
        sampler = GpuSampler(lambda s: None, nvml=nvml)
        reads = []
        real = gpu_mod.process_command
        with mock.patch.object(
            gpu_mod, "process_command", side_effect=lambda pid: reads.append(pid) or real(pid)
        ):
            first = {p.pid: p.command for p in sampler.sample_once().processes}
            second = {p.pid: p.command for p in sampler.sample_once().processes}
        name = os.path.basename(sys.executable)
        assert first[child.pid] == f"{name} -c import time; time.sleep(30) vtui-gpu-cmd"
        assert first[gone.pid] is None
        assert second == first
        assert reads.count(child.pid) == 1  # cached by (pid, create time)
    finally:
        child.kill()
        child.wait()


def test_an_unwanted_sampler_rests_until_poked() -> None:
    """Nobody reads the samples (`wanted` False): after the first, none until `poke()`."""
    got: list[object] = []
    wanted = [False]
    arrived = threading.Event()

    def on_sample(sample) -> None:
        got.append(sample)
        arrived.set()

    sampler = GpuSampler(on_sample, nvml=FakeNvml(1), interval=0.01, wanted=lambda: wanted[0])
    sampler.start()
    assert arrived.wait(2.0)
    arrived.clear()
    assert not arrived.wait(0.2) and len(got) == 1  # twenty ticks, no sample
    wanted[0] = True
    sampler.poke()
    assert arrived.wait(2.0)
    sampler.stop()
