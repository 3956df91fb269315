"""AmdSmiSource against a fake of amdsmi's Python API (6.x: process lists as dicts; memory in bytes
through amdsmi_get_gpu_memory_usage/total, else amdsmi_get_gpu_vram_usage in MB; older releases' process
handles). No AMD hardware here: vtui's AMD telemetry is untested on it."""

from __future__ import annotations

from types import SimpleNamespace

from vtui.telemetry.amdgpu import NO_AMDSMI, AmdSmiSource
from vtui.telemetry.gpu import GpuSampler, machine_source

GIB = 1 << 30


class AmdSmiException(Exception):
    pass


class FakeAmdSmi:
    AmdSmiException = AmdSmiException
    AmdSmiInitFlags = SimpleNamespace(INIT_AMD_GPUS=2)
    AmdSmiMemoryType = SimpleNamespace(VRAM=0)
    AmdSmiTemperatureType = SimpleNamespace(EDGE=0)
    AmdSmiTemperatureMetric = SimpleNamespace(CURRENT=0)

    def __init__(self, *, dict_processes: bool = True, hip_ids=(1, 0)) -> None:
        self.dict_processes = dict_processes
        self.hip_ids = hip_ids
        self.init_flags = None
        self.shutdowns = 0
        self.gpus = ["gpuA", "gpuB"]  # handles, in amdsmi's order
        self.used = {"gpuA": 10 * GIB, "gpuB": 100 * GIB}
        self.procs = {"gpuB": [(4242, 90 * GIB)]}

    def amdsmi_init(self, flags=None):
        self.init_flags = flags

    def amdsmi_shut_down(self):
        self.shutdowns += 1

    def amdsmi_get_processor_handles(self):
        return list(self.gpus)

    def amdsmi_get_gpu_enumeration_info(self, h):
        return {"hip_id": self.hip_ids[self.gpus.index(h)]}

    def amdsmi_get_gpu_asic_info(self, h):
        return {"market_name": "AMD Instinct MI300X"}

    def amdsmi_get_gpu_vram_usage(self, h):
        return {"vram_used": self.used[h] // (1 << 20), "vram_total": 192 * 1024}

    def amdsmi_get_gpu_activity(self, h):
        return {"gfx_activity": 37, "umc_activity": 5, "mm_activity": 0}

    def amdsmi_get_temp_metric(self, h, kind, metric):
        return 51

    def amdsmi_get_power_info(self, h):
        return {"current_socket_power": 310, "average_socket_power": 300, "power_limit": 750}

    def amdsmi_get_gpu_process_list(self, h):
        procs = self.procs.get(h, [])
        if self.dict_processes:
            return [
                {"pid": pid, "name": "python3", "mem": n, "memory_usage": {"vram_mem": n}} for pid, n in procs
            ]
        return [("handle", pid) for pid, _ in procs]

    def amdsmi_get_gpu_process_info(self, h, item):
        pid = item[1]
        return {"pid": pid, "mem": dict(self.procs[h])[pid]}


class BytesApi(FakeAmdSmi):
    def amdsmi_get_gpu_memory_usage(self, h, kind):
        return self.used[h]

    def amdsmi_get_gpu_memory_total(self, h, kind):
        return 192 * GIB


def test_gpus_by_hip_id_with_memory_utilization_temperature_and_power() -> None:
    smi = BytesApi()
    sample = AmdSmiSource(smi, clock=lambda: 5.0).sample()
    assert sample.available and sample.source == "amdsmi" and sample.at == 5.0
    assert smi.init_flags == 2
    assert [(g.index, g.memory_used) for g in sample.gpus] == [(0, 100 * GIB), (1, 10 * GIB)]  # hip order
    gpu = sample.gpus[0]
    assert (gpu.name, gpu.memory_total, gpu.utilization, gpu.temperature) == (
        "AMD Instinct MI300X",
        192 * GIB,
        37.0,
        51.0,
    )
    assert (gpu.power_w, gpu.power_limit_w) == (310.0, 750.0)
    (proc,) = sample.processes
    assert (proc.gpu_index, proc.pid, proc.used_memory) == (0, 4242, 90 * GIB)


def test_older_apis_vram_in_mb_and_process_handles() -> None:
    smi = FakeAmdSmi(dict_processes=False)
    sample = AmdSmiSource(smi).sample()
    assert [g.memory_used for g in sample.gpus] == [100 * GIB, 10 * GIB]
    assert sample.gpus[0].memory_total == 192 * GIB
    assert [(p.pid, p.used_memory) for p in sample.processes] == [(4242, 90 * GIB)]


def test_without_amdsmi_or_a_gpu_the_sample_says_why() -> None:
    class Broken(FakeAmdSmi):
        def amdsmi_init(self, flags=None):
            raise AmdSmiException("AMDSMI_STATUS_INIT_ERROR")

    assert AmdSmiSource(Broken()).sample().reason == "AMD SMI: AMDSMI_STATUS_INIT_ERROR"
    empty = FakeAmdSmi()
    empty.gpus = []
    assert AmdSmiSource(empty).sample().reason == "no AMD GPU"
    import vtui.telemetry.amdgpu as amdgpu

    original = amdgpu._load
    amdgpu._load = lambda: None
    try:
        assert AmdSmiSource().sample().reason == NO_AMDSMI
    finally:
        amdgpu._load = original


def test_the_machine_source_falls_back_to_amd_and_the_sampler_names_owners() -> None:
    class NoDriver:
        class NVMLError(Exception):
            pass

        def nvmlInit(self):
            raise self.NVMLError("Driver Not Loaded")

    smi = BytesApi()
    source = machine_source(NoDriver(), smi)
    sampler = GpuSampler(lambda s: None, source=source, owners=lambda pids: {4242: "qwen"})
    sample = sampler.sample_once()
    assert sample.source == "amdsmi" and sample.processes[0].instance == "qwen"
    sampler.stop()
    assert smi.shutdowns == 1
