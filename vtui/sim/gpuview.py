"""The simulated box as a `vtui.core.gpu.GpuSource`: the memory the layout's `vtui sim` instances hold
per simulated GPU (vtui.sim.gpus' registry) becomes a GpuSample, so the demo shows memory bars split by
instance just as NVML would, and preflight, placement and the launch check see the memory a sim will
find. Fields a simulation cannot know (utilization, temperature, power) are None, shown as `--`.
`gpu_sources(layout)`: this machine's GPUs paired with the simulated box, the one pair every consumer asks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from vtui.core.flagspec import int_flag
from vtui.core.gpu import SIMULATED, GpuInfo, GpuProcess, GpuSample, GpuSource, GpuSources, free_memory
from vtui.sim.gpus import GpuRegistry, registry_dir

if TYPE_CHECKING:
    from vtui.core.model import Layout

GIB = 1 << 30
__all__ = [
    "SIMULATED",
    "SimulatedGpus",
    "SimulatedSource",
    "gpu_sources",
    "registry_free",
    "simulated_sample",
]


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

    def __call__(self, owners: Mapping[int, str] | None = None) -> GpuSample:
        owners = owners or {}
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
        return GpuSample(True, SIMULATED, gpus, tuple(processes), self.clock(), "simulated")


def registry_free(registry: GpuRegistry, gpus: Sequence[int], total: int, owner: int) -> int:
    """The sim's own start check (vLLM's free-memory check, on the simulated box): the least free bytes
    over `gpus` of `total`-byte simulated GPUs, by `core.gpu.free_memory` over the registry's sample, what
    `owner` (the asking sim) already claimed counted as free. Call it holding `registry.locked()`."""
    box = SimulatedGpus(max([*gpus, 0]) + 1, total / GIB, registry=registry)
    box.total = total
    free = free_memory(box(), gpus, leaving=(owner,))
    return min((f for f in free.values() if f is not None), default=total)


def _int_flag(value: object, default: int) -> int:
    number = int_flag(value)
    return number if number is not None else default


def simulated_box(layout: Layout, registry: GpuRegistry | None = None) -> SimulatedGpus | None:
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
    return SimulatedGpus(count, gib, registry=registry)


def simulated_sample(layout: Layout, owners: Mapping[int, str] | None = None) -> GpuSample | None:
    """The simulated box's sample now; None without sims."""
    box = simulated_box(layout)
    return box(owners) if box is not None else None


class SimulatedSource:
    """The `GpuSource` of the simulated box of the layout `layout()` returns now (it may change:
    `set_layout`); unavailable while it runs no sims."""

    name = "simulated"

    def __init__(self, layout: Callable[[], Layout], clock: Callable[[], float] = time.time) -> None:
        self._layout = layout
        self._clock = clock
        self._registry: GpuRegistry | None = None  # one, kept: it reads a holder's file only once rewritten

    def sample(self) -> GpuSample:
        if self._registry is None or self._registry.root != registry_dir():
            self._registry = GpuRegistry()
        box = simulated_box(self._layout(), self._registry)
        if box is None:
            return GpuSample(
                False, "no simulated GPUs (the layout runs no sims)", (), (), self._clock(), self.name
            )
        box.clock = self._clock
        return box()

    def close(self) -> None:
        pass


def gpu_sources(layout: Callable[[], Layout], machine: GpuSource | None = None) -> GpuSources:
    """This machine's GPUs (NVML, else AMD SMI: `telemetry.gpu.machine_source`) and the layout's
    simulated box: what `core.gpu.instance_gpus` and the GPU panel ask."""
    if machine is None:
        from vtui.telemetry.gpu import machine_source

        machine = machine_source()
    return GpuSources(machine, SimulatedSource(layout))
