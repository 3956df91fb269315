"""The session's one GPU sampler (the dashboards show its samples: they run none of their own): the
supervisor's GPU source (NVML, AMD SMI, else the layout's simulated box), each process named by the
supervisor's `ProcessOwners` (a `getsid` per GPU process, no process-table walk); the last sample, sent
on the feed; and the instances' process trees (`GET /pids`). Unwatched (no feed client, no /metrics
endpoint) it rests: a feed client's arrival pokes it, a full status asks a fresh sample (`fresh`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from vtui.service.broadcast import Broadcaster
from vtui.service.wire import encode_gpu
from vtui.supervisor.supervisor import Supervisor

FRESH_S = 2.0  # a full status's GPU sample is at most this old (`fresh`)


class GpuWatch:
    def __init__(
        self,
        supervisor: Supervisor,
        feed: Broadcaster,
        enabled: bool = True,
        exporting: Callable[[], bool] = lambda: False,
    ) -> None:
        self.supervisor = supervisor
        self.feed = feed
        self.enabled = enabled  # VTUI_SUPERVISOR_GPU=0: the status says so (gpu_sampling), dashboards sample
        self._exporting = exporting  # the session's /metrics endpoint serves (it reads `last`)
        self.last: dict[str, Any] | None = None
        self._sampler: Any = None

    def start(self) -> None:
        from vtui.telemetry.gpu import GpuSampler

        if not self.enabled:
            return
        loop = asyncio.get_running_loop()

        def on_sample(sample: Any) -> None:  # the sampler's thread
            encoded = encode_gpu(sample)
            if self.feed:
                loop.call_soon_threadsafe(self.on_gpu, encoded)
            else:  # nobody to tell: no wake-up of the loop; its readers take the newest (one assignment)
                self.last = encoded

        def wanted() -> bool:  # unwatched, the GPUs are sampled when a feed client comes (`poke`)
            return bool(self.feed) or self._exporting()

        sup = self.supervisor
        self._sampler = GpuSampler(on_sample, interval=1.0, owners=sup.owners, source=sup.gpus, wanted=wanted)
        self._sampler.start()

    def poke(self) -> None:
        """A feed client came: GPUs unsampled while nobody followed, a sample for it now."""
        if self._sampler is not None:
            self._sampler.poke()

    async def fresh(self) -> None:
        """`last` at most FRESH_S old (the sampler samples only while someone follows: `start`)."""
        sampler = self._sampler
        last = self.last
        if sampler is None or (last is not None and time.time() - float(last.get("at") or 0) < FRESH_S):
            return
        self.last = encode_gpu(await asyncio.to_thread(sampler.sample_once))

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
        """Without NVML: the supervisor's simulated box, its processes named by `ProcessOwners`."""
        from vtui.core.gpu import attribute

        source = self.supervisor.gpus.simulated
        sample = source.sample() if source is not None else None
        if sample is None or not sample.available:
            return None
        return encode_gpu(attribute(sample, self.supervisor.owners({p.pid for p in sample.processes})))
