"""AMD GPUs as a `vtui.core.gpu.GpuSource`, through the `amdsmi` Python package (ROCm's AMD SMI; the
`vtui[amd]` extra) when it is installed: per GPU its name, VRAM used and total, GFX activity, edge
temperature, socket power and limit; per process its VRAM. Written against amdsmi 6.x/7.x's documented
Python API and tested against a fake of it (tests/telemetry/test_telemetry_amdgpu.py): **untested on
AMD hardware**. Without amdsmi, or without an AMD GPU, every sample is unavailable and says why.

The index of a GPU is its HIP id when amdsmi reports one (`amdsmi_get_gpu_enumeration_info`), the
numbering HIP_VISIBLE_DEVICES uses; else its place in `amdsmi_get_processor_handles()`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from vtui.core.gpu import GpuInfo, GpuProcess, GpuSample
from vtui.telemetry.gpuprocs import CommandCache

NO_AMDSMI = "no AMD SMI (pip install 'vtui[amd]' on a ROCm machine)"
MIB = 1 << 20


def _load() -> Any:
    """amdsmi, or None: optional (the `amd` extra), and ROCm's libamd_smi must be present too."""
    try:
        import amdsmi
    except ImportError:
        return None
    return amdsmi


class AmdSmiSource:
    """Samples AMD GPUs with amdsmi, initialised once on first use."""

    name = "amdsmi"

    def __init__(self, amdsmi: Any = None, clock: Callable[[], float] = time.time) -> None:
        self._smi = amdsmi
        self._clock = clock
        self._lock = threading.Lock()
        self._ready = False
        self._reason: str | None = None
        self._commands = CommandCache()

    @property
    def unusable(self) -> str | None:
        return self._reason

    def _init(self) -> str | None:
        if self._ready or self._reason is not None:
            return self._reason
        try:
            if self._smi is None:
                self._smi = _load()
            if self._smi is None:
                raise ImportError("amdsmi")
            flags = getattr(getattr(self._smi, "AmdSmiInitFlags", None), "INIT_AMD_GPUS", None)
            if flags is not None:
                self._smi.amdsmi_init(flags)
            else:
                self._smi.amdsmi_init()
        except ImportError:
            self._reason = NO_AMDSMI
        except Exception as exc:  # noqa: BLE001 — AmdSmiLibraryException, a missing libamd_smi.so (OSError)
            self._reason = f"AMD SMI: {exc}"
        else:
            self._ready = True
        return self._reason

    def close(self) -> None:
        with self._lock:
            if self._ready:
                try:
                    self._smi.amdsmi_shut_down()
                except Exception:  # noqa: BLE001 — shutting down a broken library must not raise
                    pass
                self._ready = False

    def _read(self, fn: str, *args: Any) -> Any:
        """One amdsmi call; None when this amdsmi lacks it or the GPU does not report it."""
        call = getattr(self._smi, fn, None)
        if call is None:
            return None
        try:
            return call(*args)
        except Exception:  # noqa: BLE001 — AmdSmiException: not supported on this GPU
            return None

    def sample(self) -> GpuSample:
        with self._lock:
            now = self._clock()
            reason = self._init()
            if reason is not None:
                return GpuSample(False, reason, (), (), now, self.name)
            handles = self._read("amdsmi_get_processor_handles")
            if not handles:
                return GpuSample(False, "no AMD GPU", (), (), now, self.name)
            gpus: list[GpuInfo] = []
            processes: list[GpuProcess] = []
            for place, handle in enumerate(handles):
                enum = self._read("amdsmi_get_gpu_enumeration_info", handle)
                index = enum.get("hip_id", place) if isinstance(enum, dict) else place
                index = int(index) if isinstance(index, int) else place
                gpus.append(self._info(index, handle))
                processes.extend(self._processes(index, handle))
            gpus.sort(key=lambda g: g.index)
            return GpuSample(True, None, tuple(gpus), tuple(self._commands.fill(processes)), now, self.name)

    def _memory(self, handle: Any) -> tuple[int | None, int | None]:
        """VRAM (used, total) in bytes: `amdsmi_get_gpu_memory_usage/total` (bytes), else
        `amdsmi_get_gpu_vram_usage` (MB)."""
        kind = getattr(getattr(self._smi, "AmdSmiMemoryType", None), "VRAM", None)
        if kind is not None:
            used = self._read("amdsmi_get_gpu_memory_usage", handle, kind)
            total = self._read("amdsmi_get_gpu_memory_total", handle, kind)
            if isinstance(used, int) and isinstance(total, int):
                return used, total
        vram = self._read("amdsmi_get_gpu_vram_usage", handle)
        if isinstance(vram, dict) and "vram_used" in vram and "vram_total" in vram:
            return int(vram["vram_used"]) * MIB, int(vram["vram_total"]) * MIB
        return None, None

    def _info(self, index: int, handle: Any) -> GpuInfo:
        asic = self._read("amdsmi_get_gpu_asic_info", handle)
        name = asic.get("market_name") if isinstance(asic, dict) else None
        used, total = self._memory(handle)
        activity = self._read("amdsmi_get_gpu_activity", handle)
        util = activity.get("gfx_activity") if isinstance(activity, dict) else None
        temp = None
        types = getattr(self._smi, "AmdSmiTemperatureType", None)
        metrics = getattr(self._smi, "AmdSmiTemperatureMetric", None)
        if types is not None and metrics is not None:
            temp = self._read("amdsmi_get_temp_metric", handle, types.EDGE, metrics.CURRENT)
        power = self._read("amdsmi_get_power_info", handle)
        watts = limit = None
        if isinstance(power, dict):
            for key in ("current_socket_power", "average_socket_power"):
                if isinstance(power.get(key), int | float):
                    watts = float(power[key])
                    break
            if isinstance(power.get("power_limit"), int | float):
                limit = float(power["power_limit"])
                limit = limit / 1e6 if limit > 100_000 else limit  # µW in older releases, W in newer
        return GpuInfo(
            index=index,
            name=str(name) if name else None,
            memory_used=used,
            memory_total=total,
            utilization=float(util) if isinstance(util, int | float) else None,
            temperature=float(temp) if isinstance(temp, int | float) else None,
            power_w=watts,
            power_limit_w=limit,
        )

    def _processes(self, index: int, handle: Any) -> list[GpuProcess]:
        """The processes on one GPU and their VRAM: 6.x+ lists dicts; older releases list handles that
        `amdsmi_get_gpu_process_info` reads."""
        out = []
        for item in self._read("amdsmi_get_gpu_process_list", handle) or ():
            info = item if isinstance(item, dict) else self._read("amdsmi_get_gpu_process_info", handle, item)
            if not isinstance(info, dict) or not isinstance(info.get("pid"), int):
                continue
            usage = info.get("memory_usage")
            vram = usage.get("vram_mem") if isinstance(usage, dict) else None
            if not isinstance(vram, int):
                vram = info.get("mem") if isinstance(info.get("mem"), int) else None
            out.append(GpuProcess(index, int(info["pid"]), vram, None))
        return out
