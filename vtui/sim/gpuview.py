"""The GPU panel's view of a simulated box: when there is no NVIDIA driver and the layout runs `vtui sim`
instances, the memory they hold per simulated GPU (vtui.sim.gpus' registry) becomes a GpuSample, so
the demo shows memory bars split by instance just as NVML would. Fields a simulation cannot know
(utilization, temperature, power) are None, shown as `--`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from vtui.core.flagspec import int_flag
from vtui.sim.gpus import GpuRegistry
from vtui.telemetry.gpu import GpuInfo, GpuProcess, GpuSample

if TYPE_CHECKING:
    from vtui.core.model import Layout

GIB = 1 << 30
SIMULATED = "simulated GPUs (no NVIDIA driver)"


class SimulatedGpus:
    """A GpuSampler fallback: `num_gpus` simulated GPUs of `gib_per_gpu` each, read from the registry."""

    def __init__(
        self,
        num_gpus: int,
        gib_per_gpu: float,
        *,
        registry: GpuRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.num_gpus = max(1, num_gpus)
        self.total = int(gib_per_gpu * GIB)
        self.registry = registry or GpuRegistry()
        self.clock = clock

    def __call__(self, owners: Mapping[int, str]) -> GpuSample:
        used = [0] * self.num_gpus
        processes: list[GpuProcess] = []
        for pid, held in sorted(self.registry.holders().items()):
            for gpu, nbytes in sorted(held.items()):
                if 0 <= gpu < self.num_gpus and nbytes > 0:
                    used[gpu] += nbytes
                    processes.append(GpuProcess(gpu, pid, nbytes, owners.get(pid)))
        name = f"SIM {self.total / GIB:g}GB"
        gpus = tuple(
            GpuInfo(i, name, min(used[i], self.total), self.total, None, None, None, None)
            for i in range(self.num_gpus)
        )
        return GpuSample(True, SIMULATED, gpus, tuple(processes), self.clock())


def _int_flag(value: object, default: int) -> int:
    number = int_flag(value)
    return number if number is not None else default


def simulated_sample(layout: Layout, owners: Mapping[int, str]) -> GpuSample | None:
    """The simulated box the layout's sim instances run on (their --sim-num-gpus / --sim-gpu-memory-gib,
    else the session's gpu_memory_gib, else the sim's defaults: 8 GPUs of 80 GiB); None without sims."""
    sims = [spec for spec in layout.instances if spec.engine == "sim"]
    if not sims:
        return None
    count = max(
        [_int_flag(spec.flags.get("sim-num-gpus"), 8) for spec in sims]
        + [g + 1 for spec in sims for g in spec.gpus]
    )
    gib = next(
        (
            float(value)
            for spec in sims
            if isinstance(value := spec.flags.get("sim-gpu-memory-gib"), int | float | str)
        ),
        layout.session.gpu_memory_gib or 80.0,
    )
    return SimulatedGpus(count, gib)(owners)
