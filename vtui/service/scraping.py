"""The session service's telemetry: one scrape loop per instance that serves (the lean one, or httpx for
https and keys), the samples' bounded history, the one GPU sampler, the process trees, and the
session's Prometheus endpoint (`[session] metrics_port`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from vtui.core.events import Notice
from vtui.service.exporter import MetricsEndpoint, render
from vtui.service.probes import LeanLauncher, LeanScrapeLoop
from vtui.service.service_base import ServiceBase, log
from vtui.service.wire import dumps, encode_gpu, encode_sample, feed_line
from vtui.supervisor.replicas import scrape_url
from vtui.telemetry.metrics import MetricsSample

SAMPLE_HISTORY = 3600  # one hour of 1 Hz samples per instance


_AT = "\x00at\x00"  # stands for the time in a sample's feed line (JSON writes it "\u0000at\u0000")
_AT_JSON = dumps(_AT)


def _line_template(message: dict[str, Any]) -> tuple[bytes, bytes]:
    """The feed line of `message` (as `_broadcast` writes it) cut around its `_AT` value: a restamped
    sample's line is the two halves around its time, not a JSON encoding of the whole sample again."""
    head, _, tail = feed_line(message).partition(_AT_JSON)
    return head, tail


def _restamped(sample: Any, last: Any) -> bool:
    """`sample` is `last` at another time: every other field the very same object (as MetricsWindow's
    restamp of a steady sample leaves them; a computed sample has new ones)."""
    if type(sample) is not type(last) or not isinstance(sample, MetricsSample):
        return False
    return all(getattr(sample, k) is getattr(last, k) for k in _RESTAMP_FIELDS)


_RESTAMP_FIELDS = tuple(f.name for f in dataclasses.fields(MetricsSample) if f.name != "at")


class ScrapeMixin(ServiceBase):
    def _sync_scrapers(self) -> None:
        if not self.scrape:
            return
        launcher = self.supervisor.launcher
        pool = launcher.pool if isinstance(launcher, LeanLauncher) else LeanLauncher().pool
        for st in self.supervisor.status():
            url = scrape_url(st.spec, st.state)  # a router's: its Prometheus port (vllm_router_*)
            current = self._scrapers.get(st.name)
            if current and current[0] != url:
                current[1].stop()
                current[2].cancel()
                del self._scrapers[st.name]
                current = None
            if current is None and url is not None:
                loop: Any
                if st.spec.api_key or not pool().handles(url + "/metrics", "GET"):
                    from vtui.telemetry.scrape import ScrapeLoop  # https, a key: an attached server

                    loop = ScrapeLoop(
                        st.name,
                        url,
                        self._sample_sink(st.name),
                        interval=self.scrape_interval,
                        api_key=st.spec.api_key,
                    )
                else:
                    loop = LeanScrapeLoop(
                        st.name, url, self._sample_sink(st.name), pool, interval=self.scrape_interval
                    )
                self._scrapers[st.name] = (url, loop, self._spawn(loop.run()))
        listed = {st.name for st in self.supervisor.status()}
        for name in [n for n in self._scrapers if n not in listed]:  # a new layout dropped it (attached)
            _, loop, task = self._scrapers.pop(name)
            loop.stop()
            task.cancel()
        for _, loop, _ in self._scrapers.values():
            loop.keep_text = self._exporter is not None  # the exporter reads the last payload

    def _sample_sink(self, name: str) -> Callable[[Any], None]:
        return lambda sample: self._on_sample(name, sample)

    def _on_sample(self, name: str, sample: Any) -> None:
        last = self._encoded.get(name)
        template: tuple[bytes, bytes] | None = None
        if last is not None and _restamped(sample, last[0]):
            encoded = {**last[1], "at": sample.at}  # a steady server's sample (MetricsWindow.update)
            template = last[2]
        else:
            try:
                encoded = encode_sample(sample)
            except Exception as exc:  # noqa: BLE001 — a sample that cannot be sent must not end the scrape loop
                log(f"{name}: metrics sample not encodable: {exc!r}")
                return
        self.samples.setdefault(name, deque(maxlen=SAMPLE_HISTORY)).append(encoded)
        if sample.running is not None or sample.waiting is not None:  # the stuck watchdog, idle sleep
            busy = (sample.running or 0) + (sample.waiting or 0) > 0
            progress = (sample.prompt_tokens_total, sample.generation_tokens_total)  # counters only
            self.supervisor.observe_load(name, busy=busy, progress=progress)
        if self.feed:
            if template is None:
                template = _line_template({"type": "sample", "sample": {**encoded, "at": _AT}})
            self.feed.broadcast_line(template[0] + dumps(sample.at) + template[1], held=True)
        self._encoded[name] = (sample, encoded, template)

    def _start_gpu(self) -> None:
        """The session's one GPU sampler (the dashboards show its samples: they run none of their own):
        NVML, else the simulated GPUs of the layout's sims."""
        from vtui.telemetry.gpu import GpuSampler

        if not self.gpu:  # VTUI_SUPERVISOR_GPU=0: the status says so (gpu_sampling) and dashboards sample
            return
        loop = asyncio.get_running_loop()

        def on_sample(sample: Any) -> None:
            encoded = encode_gpu(sample)
            loop.call_soon_threadsafe(self._on_gpu, encoded)

        def simulated(owners: Any) -> Any:  # no NVIDIA driver: the sims' GPUs, as the dashboard draws them
            from vtui.sim.gpuview import simulated_sample

            return simulated_sample(self.supervisor.layout, owners)

        def owners() -> dict[int, str]:  # no process walk each second for a driverless box with no sims
            sampler = self._gpu_sampler
            if sampler is not None and sampler.unusable is not None:
                if not any(spec.engine == "sim" for spec in self.supervisor.layout.instances):
                    return {}
            return self._pid_owner()

        self._gpu_sampler = GpuSampler(on_sample, interval=1.0, pid_owner=owners, fallback=simulated)
        self._gpu_sampler.start()

    def _on_gpu(self, encoded: dict[str, Any]) -> None:
        self.last_gpu = encoded
        self.feed.broadcast({"type": "gpu", "sample": encoded})

    def _pids(self) -> dict[str, list[int]]:
        """Every live process of each running instance (GPU memory is held by EngineCore/Workers)."""
        return {pid_owner: sorted(pids) for pid_owner, pids in self._trees().items()}

    def _trees(self) -> dict[str, set[int]]:
        trees: dict[str, set[int]] = {}
        for st in self.supervisor.status():
            if st.state.running:
                with contextlib.suppress(Exception):
                    trees[st.name] = self.supervisor.pids_of(st.name)
        return trees

    def _pid_owner(self) -> dict[int, str]:
        owners: dict[int, str] = {}
        for st in self.supervisor.status():
            if st.state.running:
                with contextlib.suppress(Exception):
                    for pid in self.supervisor.pids_of(st.name):
                        owners[pid] = st.name
        return owners

    # -- the session's Prometheus endpoint ---------------------------------------------------------------
    async def _configure_exporter(self) -> None:
        """Serve `[session] metrics_port` on `metrics_host` (rebound when a new layout moves it, ended
        when it drops it). A port that cannot be bound is said (log, a notice) and supervision goes on."""
        session = self.supervisor.layout.session
        where = (session.metrics_host, session.metrics_port) if session.metrics_port else None
        current = self._exporter
        if current is not None and (current.host, current.port) == where:
            return
        if current is not None:
            await current.stop()
            self._exporter = None
        if where is not None:
            endpoint = MetricsEndpoint(where[0], where[1], self._render_metrics)
            try:
                await endpoint.start()
            except OSError as exc:
                text = f"metrics_port {where[1]} on {where[0]}: cannot serve /metrics: {exc.strerror or exc}"
                log(text)
                self.hub.on_event(Notice(None, "error", text))
            else:
                self._exporter = endpoint
                log(f"serving the session's Prometheus metrics on http://{where[0]}:{where[1]}/metrics")
        self._sync_scrapers()

    async def _render_metrics(self) -> str:
        statuses = self.supervisor.status()
        texts: dict[str, str] = {}
        up: dict[str, bool] = {}
        for name, (_, loop, _) in self._scrapers.items():
            up[name] = loop.last_text is not None  # kept on success, dropped on a failed scrape
            if loop.last_text:
                texts[name] = loop.last_text
        gpu = self.last_gpu
        if not (gpu and gpu.get("available")) and any(st.spec.engine == "sim" for st in statuses):
            gpu = await asyncio.to_thread(self._simulated_gpus)
        # ~20 ms for 8 real payloads (benchmarks/bench_exporter.py): off the loop, on frozen snapshots
        return await asyncio.to_thread(partial(render, statuses, texts, up=up, gpu=gpu))

    def _simulated_gpus(self) -> dict[str, Any] | None:
        """Without NVML: the simulated GPUs the layout's `vtui sim` instances hold memory on."""
        from vtui.sim.gpuview import simulated_sample

        sample = simulated_sample(self.supervisor.layout, self._pid_owner())
        return encode_gpu(sample) if sample is not None else None
