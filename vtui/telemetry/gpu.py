"""GPU sampling through NVML (pynvml) in its own thread: per GPU name, memory as nvidia-smi reports it,
utilization, temperature, power; per process GPU memory mapped to the vtui instance whose process tree
holds the PID, and its command line (psutil, read once per process). No NVML is a state ("no NVIDIA
driver"), not an error; a field the GPU does not report is None.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

__all__ = ["GpuInfo", "GpuProcess", "GpuSample", "GpuSampler", "NO_DRIVER"]

NO_DRIVER = "no NVIDIA driver"


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str | None
    memory_used: int | None  # bytes, as nvidia-smi shows it (NVML memory v2 when available)
    memory_total: int | None  # bytes
    utilization: float | None  # %
    temperature: float | None  # C
    power_w: float | None
    power_limit_w: float | None


@dataclass(frozen=True)
class GpuProcess:
    gpu_index: int
    pid: int
    used_memory: int | None  # bytes
    instance: str | None  # None: a process of no vtui instance ("other")
    command: str | None = None  # its command line (program as base name); None: unknown (a simulated GPU)


COMMAND_CHARS = 200  # longest command kept (the GPU panel cuts it to its width anyway)


def process_command(pid: int) -> tuple[float, str] | None:
    """(create time, command line) of a process: its program as a base name, then its arguments (vLLM's
    engine and workers show their process titles, `VLLM::EngineCore`); None when it is gone or not
    ours to read."""
    import os

    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            created = proc.create_time()
            argv = proc.cmdline() or [proc.name()]
    except (psutil.Error, OSError):
        return None
    if not argv or not argv[0]:
        return None
    return created, " ".join([os.path.basename(argv[0]), *argv[1:]])[:COMMAND_CHARS]


@dataclass(frozen=True)
class GpuSample:
    available: bool
    reason: str | None
    gpus: tuple[GpuInfo, ...]
    processes: tuple[GpuProcess, ...]
    at: float

    def processes_on(self, index: int) -> tuple[GpuProcess, ...]:
        return tuple(p for p in self.processes if p.gpu_index == index)


def _load_nvml() -> Any:
    import pynvml  # nvidia-ml-py; imported lazily so vtui starts without it

    return pynvml


class GpuSampler:
    """Samples every GPU every `interval` seconds in a daemon thread and hands each `GpuSample` to
    `on_sample` **from that thread** (the UI marshals it onto its loop). `pid_owner()` returns
    pid -> instance name for every process of every instance (the supervisor's process trees)."""

    def __init__(
        self,
        on_sample: Callable[[GpuSample], None],
        *,
        interval: float = 1.0,
        pid_owner: Callable[[], Mapping[int, str]] | None = None,
        nvml: Any = None,
        clock: Callable[[], float] = time.time,
        fallback: Callable[[Mapping[int, str]], GpuSample | None] | None = None,
    ) -> None:
        self._on_sample = on_sample
        self._fallback = fallback  # without NVML: e.g. the simulated GPUs of `vtui sim` instances
        self.interval = interval
        self._pid_owner = pid_owner
        self._nvml = nvml
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = False
        self._reason: str | None = None  # why NVML is unusable, once known
        self._commands: dict[int, tuple[float, str]] = {}  # pid -> (create time, command), seen pids only

    @property
    def unusable(self) -> str | None:
        """Why NVML cannot be used (e.g. "no NVIDIA driver"), once a sample found out; else None."""
        return self._reason

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="vtui-gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._lock:
            if self._ready:
                try:
                    self._nvml.nvmlShutdown()
                except Exception:  # noqa: BLE001 — shutting down a broken driver must not raise
                    pass
                self._ready = False

    def _run(self) -> None:
        while not self._stop.is_set():
            sample = self.sample_once()
            try:
                self._on_sample(sample)
            except Exception:  # noqa: BLE001 — a consumer bug must not kill sampling
                pass
            if not sample.available and sample.reason == NO_DRIVER and self._fallback is None:
                return  # nothing will change without a driver; the last sample says why
            self._stop.wait(self.interval)

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

    def sample_once(self) -> GpuSample:
        with self._lock:
            now = self._clock()
            reason = self._init()
            if reason is not None:
                if self._fallback is not None:
                    fallback = self._fallback(self._owners())
                    if fallback is not None:
                        return fallback
                return GpuSample(False, reason, (), (), now)
            nvml = self._nvml
            try:
                count = nvml.nvmlDeviceGetCount()
            except nvml.NVMLError as exc:
                return GpuSample(False, f"NVML: {exc}", (), (), now)
            owners = self._owners()
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
                        GpuProcess(
                            index,
                            int(proc.pid),
                            int(used) if used is not None else None,
                            owners.get(int(proc.pid)),
                        )
                    )
            if not gpus:
                return GpuSample(False, "no NVIDIA GPU", (), (), now)
            return GpuSample(True, None, tuple(gpus), tuple(self._with_commands(processes)), now)

    def _with_commands(self, processes: list[GpuProcess]) -> list[GpuProcess]:
        """Each process with its command line, read once per process (a pid seen again is checked by its
        create time: a recycled pid gets its own command); pids gone from the GPUs are forgotten."""
        import dataclasses

        import psutil

        known: dict[int, tuple[float, str]] = {}
        out = []
        for proc in processes:
            entry = known.get(proc.pid) or self._commands.get(proc.pid)
            if entry is not None and proc.pid not in known:
                try:
                    if psutil.Process(proc.pid).create_time() != entry[0]:
                        entry = None
                except (psutil.Error, OSError):
                    entry = None
            if entry is None:
                entry = process_command(proc.pid)
            if entry is not None:
                known[proc.pid] = entry
                proc = dataclasses.replace(proc, command=entry[1])
            out.append(proc)
        self._commands = known
        return out

    def _owners(self) -> Mapping[int, str]:
        if self._pid_owner is None:
            return {}
        try:
            return self._pid_owner()
        except Exception:  # noqa: BLE001 — attribution is best effort
            return {}

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
