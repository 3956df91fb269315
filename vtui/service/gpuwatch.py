"""The session's one GPU sampler (the dashboards show its samples: they run none of their own): NVML,
else the simulated GPUs of the layout's sims; the last sample, sent on the feed; and the instances'
process trees it needs to name the owner of each GPU process (also `GET /pids`)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from vtui.service.broadcast import Broadcaster
from vtui.service.wire import encode_gpu
from vtui.supervisor.supervisor import Supervisor


class GpuWatch:
    def __init__(self, supervisor: Supervisor, feed: Broadcaster, enabled: bool = True) -> None:
        self.supervisor = supervisor
        self.feed = feed
        self.enabled = enabled  # VTUI_SUPERVISOR_GPU=0: the status says so (gpu_sampling), dashboards sample
        self.last: dict[str, Any] | None = None
        self._sampler: Any = None

    def start(self) -> None:
        from vtui.telemetry.gpu import GpuSampler

        if not self.enabled:
            return
        loop = asyncio.get_running_loop()

        def on_sample(sample: Any) -> None:
            encoded = encode_gpu(sample)
            loop.call_soon_threadsafe(self.on_gpu, encoded)

        def simulated(owners: Any) -> Any:  # no NVIDIA driver: the sims' GPUs, as the dashboard draws them
            from vtui.sim.gpuview import simulated_sample

            return simulated_sample(self.supervisor.layout, owners)

        def owners() -> dict[int, str]:  # no process walk each second for a driverless box with no sims
            sampler = self._sampler
            if sampler is not None and sampler.unusable is not None:
                if not any(spec.engine == "sim" for spec in self.supervisor.layout.instances):
                    return {}
            return self.pid_owner()

        self._sampler = GpuSampler(on_sample, interval=1.0, pid_owner=owners, fallback=simulated)
        self._sampler.start()

    async def stop(self) -> None:
        if self._sampler is not None:
            await asyncio.to_thread(self._sampler.stop)

    def on_gpu(self, encoded: dict[str, Any]) -> None:
        self.last = encoded
        self.feed.broadcast({"type": "gpu", "sample": encoded})

    def pids(self) -> dict[str, list[int]]:
        """Every live process of each running instance (GPU memory is held by EngineCore/Workers)."""
        return {pid_owner: sorted(pids) for pid_owner, pids in self._trees().items()}

    def _trees(self) -> dict[str, set[int]]:
        trees: dict[str, set[int]] = {}
        for st in self.supervisor.status():
            if st.state.running:
                with contextlib.suppress(Exception):
                    trees[st.name] = self.supervisor.pids_of(st.name)
        return trees

    def pid_owner(self) -> dict[int, str]:
        owners: dict[int, str] = {}
        for st in self.supervisor.status():
            if st.state.running:
                with contextlib.suppress(Exception):
                    for pid in self.supervisor.pids_of(st.name):
                        owners[pid] = st.name
        return owners

    async def for_export(self) -> dict[str, Any] | None:
        """The GPU sample the session's /metrics shows: the last, else (no NVML) the simulated GPUs the
        layout's `vtui sim` instances hold memory on."""
        gpu = self.last
        if not (gpu and gpu.get("available")) and any(
            st.spec.engine == "sim" for st in self.supervisor.status()
        ):
            gpu = await asyncio.to_thread(self._simulated_gpus)
        return gpu

    def _simulated_gpus(self) -> dict[str, Any] | None:
        from vtui.sim.gpuview import simulated_sample

        sample = simulated_sample(self.supervisor.layout, self.pid_owner())
        return encode_gpu(sample) if sample is not None else None
