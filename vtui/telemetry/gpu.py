"""NVIDIA GPUs as a `vtui.core.gpu.GpuSource` (NVML, pynvml): per GPU name, memory as nvidia-smi reports
it, utilization, temperature, power; per process GPU memory and its command line (psutil, read once per
process). `machine_source`: NVML, else AMD SMI (`telemetry.amdgpu`). `GpuSampler`: any source sampled in
its own thread, each process named by the instance that owns it. No driver is a state ("no NVIDIA
driver"), not an error; a field the GPU does not report is None.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import Any

from vtui.core.gpu import NO_DRIVER, GpuInfo, GpuProcess, GpuSample, GpuSource, attribute
from vtui.telemetry.gpuprocs import CommandCache

__all__ = ["NO_DRIVER", "CommandCache", "GpuInfo", "GpuProcess", "GpuSample", "GpuSampler", "NvmlSource"]


def _load_nvml() -> Any:
    import pynvml  # nvidia-ml-py; imported lazily so vtui starts without it

    return pynvml


class NvmlSource:
    """The `GpuSource` of NVIDIA GPUs: NVML (nvidia-ml-py), initialised once on first use. Without a
    driver (or pynvml) every sample is unavailable with `unusable` as its reason."""

    name = "nvml"

    def __init__(self, nvml: Any = None, clock: Callable[[], float] = time.time) -> None:
        self._nvml = nvml
        self._clock = clock
        self._lock = threading.Lock()
        self._ready = False
        self._reason: str | None = None  # why NVML is unusable, once known
        self._commands = CommandCache()

    @property
    def unusable(self) -> str | None:
        """Why NVML cannot be used (e.g. "no NVIDIA driver"), once a sample found out; else None."""
        return self._reason

    def close(self) -> None:
        with self._lock:
            if self._ready:
                try:
                    self._nvml.nvmlShutdown()
                except Exception:  # noqa: BLE001 — shutting down a broken driver must not raise
                    pass
                self._ready = False

    def _init(self) -> str | None:
        """Initialise NVML once; the reason it is unusable, or None."""
        if self._ready:
            return None
        if self._reason is not None:
            return self._reason
        try:
            if self._nvml is None:
                self._nvml = _load_nvml()
            self._nvml.nvmlInit()
        except ImportError:
            self._reason = NO_DRIVER
        except Exception as exc:  # noqa: BLE001 — pynvml.NVMLError and ctypes OSErrors alike
            error = getattr(self._nvml, "NVMLError", None)
            self._reason = NO_DRIVER if error is None or isinstance(exc, error | OSError) else f"NVML: {exc}"
        else:
            self._ready = True
        return self._reason

    def sample(self) -> GpuSample:
        with self._lock:
            now = self._clock()
            reason = self._init()
            if reason is not None:
                return GpuSample(False, reason, (), (), now, self.name)
            nvml = self._nvml
            try:
                count = nvml.nvmlDeviceGetCount()
            except nvml.NVMLError as exc:
                return GpuSample(False, f"NVML: {exc}", (), (), now, self.name)
            gpus: list[GpuInfo] = []
            processes: list[GpuProcess] = []
            for index in range(count):
                try:
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                except nvml.NVMLError:
                    gpus.append(GpuInfo(index, None, None, None, None, None, None, None))
                    continue
                gpus.append(self._info(index, handle))
                for proc in self._field(partial(nvml.nvmlDeviceGetComputeRunningProcesses, handle)) or ():
                    used = getattr(proc, "usedGpuMemory", None)
                    processes.append(
                        GpuProcess(index, int(proc.pid), int(used) if used is not None else None, None)
                    )
            if not gpus:
                return GpuSample(False, "no NVIDIA GPU", (), (), now, self.name)
            return GpuSample(True, None, tuple(gpus), tuple(self._commands.fill(processes)), now, self.name)

    def _field(self, read: Callable[[], Any]) -> Any:
        """One NVML read; None when the GPU does not report it (NotSupported) or fails to."""
        try:
            return read()
        except self._nvml.NVMLError:
            return None

    def _memory(self, handle: Any) -> tuple[int | None, int | None]:
        nvml = self._nvml
        v2 = getattr(nvml, "nvmlMemory_v2", None)
        if v2 is not None:  # nvidia-smi shows v2 "used" (v1 also counts driver-reserved memory)
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(handle, version=v2)
                return int(mem.used), int(mem.total)
            except (nvml.NVMLError, TypeError, AttributeError):
                pass
        mem = self._field(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        return (int(mem.used), int(mem.total)) if mem is not None else (None, None)

    def _info(self, index: int, handle: Any) -> GpuInfo:
        nvml = self._nvml
        name = self._field(lambda: nvml.nvmlDeviceGetName(handle))
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        used, total = self._memory(handle)
        util = self._field(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        temp = self._field(
            lambda: nvml.nvmlDeviceGetTemperature(handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
        )
        power = self._field(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        limit = self._field(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        return GpuInfo(
            index=index,
            name=name,
            memory_used=used,
            memory_total=total,
            utilization=float(util.gpu) if util is not None else None,
            temperature=float(temp) if temp is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            power_limit_w=limit / 1000.0 if limit is not None else None,
        )


def machine_source(nvml: Any = None, amdsmi: Any = None, clock: Callable[[], float] = time.time) -> GpuSource:
    """This machine's GPUs: NVML, else AMD SMI (the `amdsmi` package, when installed), as one source
    whose sample is the first available one (else NVML's: "no NVIDIA driver")."""
    from vtui.core.gpu import FallbackSource
    from vtui.telemetry.amdgpu import AmdSmiSource

    return FallbackSource(NvmlSource(nvml, clock), AmdSmiSource(amdsmi, clock))


Owners = Callable[[Collection[int]], Mapping[int, str]]


class GpuSampler:
    """Samples `source` every `interval` seconds in a daemon thread and hands each `GpuSample` to
    `on_sample` **from that thread** (the UI marshals it onto its loop). `owners(pids)` names the
    instance of each GPU-holding pid it knows (the supervisor's `ProcessOwners`): asked only for the
    pids the sample lists. Without a source: this machine's (`machine_source`). `wanted()` False: no one
    reads the samples now, the tick is skipped (`poke()` samples at once when someone comes)."""

    def __init__(
        self,
        on_sample: Callable[[GpuSample], None],
        *,
        interval: float = 1.0,
        owners: Owners | None = None,
        source: GpuSource | None = None,
        nvml: Any = None,
        clock: Callable[[], float] = time.time,
        wanted: Callable[[], bool] | None = None,
    ) -> None:
        self._on_sample = on_sample
        self.interval = interval
        self._owners = owners
        self._wanted = wanted
        self._poked = threading.Event()
        self.source: GpuSource = source if source is not None else machine_source(nvml, clock=clock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="vtui-gpu-sampler", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Sample now (a reader came), not at the next tick."""
        self._poked.set()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._poked.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.source.close()

    def _run(self) -> None:
        first = True
        while not self._stop.is_set():
            if not first and self._wanted is not None and not self._wanted():
                self._poked.wait(self.interval)  # nobody reads them: no sample until the next tick or poke
                self._poked.clear()
                continue
            first = False
            sample = self.sample_once()
            try:
                self._on_sample(sample)
            except Exception:  # noqa: BLE001 — a consumer bug must not kill sampling
                pass
            if (
                not sample.available
                and sample.reason == NO_DRIVER
                and not getattr(self.source, "simulated", None)
            ):
                return  # nothing will change without a driver (and no simulated box); the last sample says why
            self._poked.wait(self.interval)
            self._poked.clear()

    def sample_once(self) -> GpuSample:
        sample = self.source.sample()
        if self._owners is None or not sample.processes:
            return sample
        try:
            owners = self._owners({p.pid for p in sample.processes})
        except Exception:  # noqa: BLE001 — attribution is best effort
            return sample
        return attribute(sample, owners)
