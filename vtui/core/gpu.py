"""The GPU source: what GPUs a machine has, and the one rule of what an instance sees on them.

A `GpuSource` hands out `GpuSample`s. Its implementations live where their I/O is: NVML and AMD SMI in
`vtui.telemetry.gpu` / `vtui.telemetry.amdgpu`, the simulated box of `vtui sim` instances in
`vtui.sim.gpuview`, another host's GPUs (the samples its supervisor's feed brings) as `FedSource` here.
`GpuSources` pairs the machine's source with the simulated one, and `instance_gpus` is the one answer
to "which GPUs does this instance land on, and how much memory is free there": preflight, replica
placement, the supervisor's check before a launch, the planner, the dashboard and the sim's own
start check all ask it. No I/O here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from vtui.core.model import InstanceSpec

__all__ = [
    "NO_DRIVER",
    "SIMULATED",
    "FallbackSource",
    "FedSource",
    "GpuInfo",
    "GpuProcess",
    "GpuSample",
    "GpuSource",
    "GpuSources",
    "InstanceGpus",
    "UnavailableSource",
    "attribute",
    "free_memory",
    "instance_gpu_indices",
    "instance_gpus",
    "sees_simulated",
]

NO_DRIVER = "no NVIDIA driver"
SIMULATED = "simulated GPUs (no NVIDIA driver)"


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
    instance: str | None  # None: a process of no vtui instance ("other"); "SESSION/NAME": another session's
    command: str | None = None  # its command line (program as base name); None: unknown (a simulated GPU)


@dataclass(frozen=True)
class GpuSample:
    available: bool
    reason: str | None
    gpus: tuple[GpuInfo, ...]
    processes: tuple[GpuProcess, ...]
    at: float
    source: str | None = None  # "nvml", "amdsmi", "simulated"; None: not said (an older supervisor's)

    def processes_on(self, index: int) -> tuple[GpuProcess, ...]:
        return tuple(p for p in self.processes if p.gpu_index == index)

    @property
    def simulated(self) -> bool:
        return self.source == "simulated" or self.reason == SIMULATED


class GpuSource(Protocol):
    """Where GPU samples come from. `sample()` may block (NVML, files): call it off the event loop."""

    name: str  # "nvml", "amdsmi", "simulated", "remote", "none"

    def sample(self) -> GpuSample: ...

    def close(self) -> None: ...


class UnavailableSource:
    """No GPUs to sample, and why."""

    name = "none"

    def __init__(self, reason: str, clock: Callable[[], float] | None = None) -> None:
        self.reason = reason
        self._clock = clock

    def sample(self) -> GpuSample:
        return GpuSample(False, self.reason, (), (), self._clock() if self._clock else 0.0)

    def close(self) -> None:
        pass


class FedSource:
    """GPUs sampled elsewhere: the latest sample a feed brought (another host's supervisor, or the
    session supervisor a dashboard follows). Unavailable until the first one arrives."""

    name = "remote"

    def __init__(self, reason: str = "no GPU sample yet") -> None:
        self._last = GpuSample(False, reason, (), (), 0.0)

    def update(self, sample: GpuSample) -> None:
        self._last = sample

    def sample(self) -> GpuSample:
        return self._last

    def close(self) -> None:
        pass


class FallbackSource:
    """The first source whose sample is available (NVML, then AMD SMI, then the simulated box); when
    none is, the first one's sample (its reason: "no NVIDIA driver")."""

    def __init__(self, *sources: GpuSource) -> None:
        self.sources = sources
        self.name = sources[0].name if sources else "none"

    def sample(self) -> GpuSample:
        first: GpuSample | None = None
        for source in self.sources:
            got = source.sample()
            if got.available:
                self.name = source.name
                return got
            first = first or got
        return first or GpuSample(False, NO_DRIVER, (), (), 0.0)

    def close(self) -> None:
        for source in self.sources:
            source.close()


def sees_simulated(spec: InstanceSpec) -> bool:
    """Whether an instance runs on the simulated GPUs: a `vtui sim` not on `--sim-device cuda` (which
    holds real CUDA memory, seen by NVML)."""
    return spec.engine == "sim" and spec.flags.get("sim-device") != "cuda"


@dataclass
class GpuSources:
    """This machine's GPUs (`machine`: NVML, AMD SMI) and the simulated box its sims hold memory on
    (`simulated`; None: no sims). `for_instance` picks the one an instance runs on; `panel` is what the
    GPU panel shows: the machine's GPUs, else the simulated ones."""

    machine: GpuSource
    simulated: GpuSource | None = None
    name = "machine"

    def sample(self) -> GpuSample:  # a GpuSource itself: the panel's sample
        return self.panel()

    def for_instance(self, spec: InstanceSpec) -> GpuSource:
        if self.simulated is not None and sees_simulated(spec):
            return self.simulated
        return self.machine

    def panel(self) -> GpuSample:
        sample = self.machine.sample()
        if sample.available or self.simulated is None:
            return sample
        simulated = self.simulated.sample()
        return simulated if simulated.available else sample

    def close(self) -> None:
        self.machine.close()
        if self.simulated is not None:
            self.simulated.close()


def _flag_int(flags: Mapping[str, object], name: str) -> int:
    value = flags.get(name, 1)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return 1
    try:
        return max(1, int(value))
    except ValueError:
        return 1


def instance_gpu_indices(spec: InstanceSpec) -> list[int]:
    """The GPUs an instance's ranks land on: its `gpus` (first TP × PP × DP of them), else 0..N-1."""
    ranks = (
        _flag_int(spec.flags, "tensor-parallel-size")
        * _flag_int(spec.flags, "pipeline-parallel-size")
        * _flag_int(spec.flags, "data-parallel-size")
    )
    return list(spec.gpus[:ranks]) if spec.gpus else list(range(ranks))


@dataclass(frozen=True)
class InstanceGpus:
    """What one instance sees: its GPU indices, and per index the free bytes (None: not known) and the
    total. `available` False: the source has no usable sample (`reason` says why)."""

    indices: tuple[int, ...]
    free: Mapping[int, int | None]
    total: Mapping[int, int | None]
    sample: GpuSample
    available: bool
    reason: str | None

    @property
    def smallest_total(self) -> int | None:
        known = [t for t in self.total.values() if t]
        return min(known) if known else None

    def requested(self, utilization: float) -> dict[int, int]:
        """vLLM's start check (`request_memory`): ceil(utilization × total) per GPU of known size."""
        return {i: math.ceil(t * utilization) for i, t in self.total.items() if t is not None}


def free_memory(
    sample: GpuSample, indices: Iterable[int], leaving: Iterable[int] = ()
) -> dict[int, int | None]:
    """Free bytes per GPU index: total − used, less the memory of `leaving` pids (about to go: an
    instance's own previous tree, or the asking process itself); None for a GPU not known."""
    gone = set(leaving)
    by_index = {g.index: g for g in sample.gpus}
    out: dict[int, int | None] = {}
    for index in indices:
        info = by_index.get(index)
        if info is None or info.memory_total is None or info.memory_used is None:
            out[index] = None
            continue
        held = sum(p.used_memory or 0 for p in sample.processes_on(index) if p.pid in gone)
        out[index] = info.memory_total - max(0, info.memory_used - held)
    return out


def instance_gpus(
    spec: InstanceSpec,
    source: GpuSources | GpuSource | GpuSample,
    *,
    leaving: Iterable[int] = (),
    every: bool = False,
) -> InstanceGpus:
    """The one rule: the GPUs `spec` lands on and their free memory, from the source it runs on (a
    `GpuSources` picks it: the simulated box for a sim, else the machine's GPUs) or from a sample at
    hand (the dashboard's feed). A sample of the other kind (NVML's for a sim on the simulated box, or
    simulated GPUs for a real vLLM) is not what the instance sees: unavailable. `every`: every GPU of
    that source, not only the instance's own (replica placement chooses among them). `leaving`: pids
    about to go, whose memory counts as free."""
    if isinstance(source, GpuSample):
        sample = source
    elif isinstance(source, GpuSources):
        sample = source.for_instance(spec).sample()
    else:
        sample = source.sample()
    wanted = tuple(instance_gpu_indices(spec))
    if sample.available and sample.simulated != sees_simulated(spec):
        kind = "simulated GPUs" if sample.simulated else "the machine's GPUs"
        sample = dataclasses.replace(sample, available=False, reason=f"{kind}, not this instance's")
    if not sample.available:
        return InstanceGpus(
            wanted, dict.fromkeys(wanted), dict.fromkeys(wanted), sample, False, sample.reason
        )
    by_index = {g.index: g for g in sample.gpus}
    if every:
        wanted = tuple(sorted(by_index))
    total = {i: by_index[i].memory_total if i in by_index else None for i in wanted}
    return InstanceGpus(wanted, free_memory(sample, wanted, leaving), total, sample, True, None)


def attribute(sample: GpuSample, owners: Mapping[int, str]) -> GpuSample:
    """The sample with each process's `instance` from `owners` (pid -> instance name)."""
    if not sample.processes:
        return sample
    processes = tuple(
        dataclasses.replace(p, instance=owners.get(p.pid, p.instance)) for p in sample.processes
    )
    return dataclasses.replace(sample, processes=processes)
