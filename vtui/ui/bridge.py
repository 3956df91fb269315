"""Turns what the session's supervisor sends into Textual messages.

The dashboard is a client only: the session supervisor (`vtui.service.remote.RemoteSupervisor`) owns
the instances, probes and scrapes them and samples the GPUs; its feed brings the events, snapshots,
metrics and GPU samples, and the bridge runs no scrape loop and no health probe. Only when that
supervisor samples no GPUs (`VTUI_SUPERVISOR_GPU=0`) does a GpuSampler run here, attributing GPU
processes through the supervisor's process trees (or a sampler the caller gives: tests, benchmarks).
The bridge never touches widgets; it only posts messages, and the App's handlers own the state.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from textual.app import App

from vtui.core.api import HostFeed, SupervisorApi, TelemetryFeed
from vtui.core.events import Event, LogLines, Notice, gone
from vtui.core.model import Layout
from vtui.core.refusals import PreflightError
from vtui.sim.gpuview import gpu_sources
from vtui.telemetry.gpu import GpuSample, GpuSampler
from vtui.telemetry.metrics import MetricsSample
from vtui.ui.logfeed import LogCoalescer
from vtui.ui.messages import (
    GpuArrived,
    HostsChanged,
    LogsArrived,
    MetricsBackfill,
    NoticeArrived,
    StatusesChanged,
    SupervisorFailed,
    TelemetryBatch,
)


class Sampler(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


# (on_sample, pid_owner) -> a sampler with start()/stop() (None: no sampler); False disables GPU sampling.
GpuSamplerFactory = Callable[[Callable[[GpuSample], None], Callable[[], Mapping[int, str]]], "Sampler | None"]


def default_gpu_sampler(
    on_sample: Callable[[GpuSample], None],
    pid_owner: Callable[[], Mapping[int, str]],
    layout: Callable[[], Layout] | None = None,
) -> Sampler | None:
    """The machine's GPUs (NVML, AMD SMI); without them, the simulated GPUs of the layout's sims."""
    source = gpu_sources(layout) if layout is not None else None
    return GpuSampler(on_sample, interval=1.0, owners=lambda _pids: pid_owner(), source=source)


class Bridge:
    def __init__(
        self,
        app: App[Any],
        supervisor: SupervisorApi,
        *,
        autostart: bool = True,
        gpu_sampler: GpuSamplerFactory | None | bool = None,
    ) -> None:
        self.app = app
        self.supervisor = supervisor
        self.autostart = autostart
        self._gpu_default = gpu_sampler is None or gpu_sampler is True  # NVML, else the sims' GPUs
        self._gpu_factory = None if isinstance(gpu_sampler, bool) else gpu_sampler
        self._gpu: Sampler | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._unsubscribe_more: list[Callable[[], None]] = []
        # The session supervisor scrapes and sends samples and snapshots on its feed.
        self._feed = supervisor if isinstance(supervisor, TelemetryFeed) else None
        self.logs = LogCoalescer(self._post_logs)  # log lines: coalesced, bounded (vtui.ui.logfeed)
        # samples and log batches go to the App together, one TelemetryBatch per short window
        self._batch_lock = threading.Lock()
        self._samples: list[MetricsSample] = []
        self._log_batches: list[tuple[str, tuple[str, ...], int]] = []
        self._armed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.logs.bind(self._loop)
        self._unsubscribe = self.supervisor.subscribe(self._on_event)
        if self._feed is not None:
            self._unsubscribe_more = [
                self._feed.subscribe_telemetry(self._on_telemetry),
                self._feed.subscribe_statuses(self._post_statuses),
            ]
        if isinstance(self.supervisor, HostFeed):  # `vtui --host`: other machines' links
            self._unsubscribe_more.append(self.supervisor.subscribe_hosts(self._post_hosts))
            self._post_hosts()
        self.app.run_worker(self._supervise(), name="supervisor", group="bridge", exit_on_error=False)
        if not self._gpu_from_feed:  # else after the feed's hello, only if it carries no GPU samples
            self._start_gpu()
        self._post_statuses()

    @property
    def _gpu_from_feed(self) -> bool:
        return self._feed is not None and self._gpu_factory is None and self._gpu_default

    def _start_gpu(self) -> None:
        sampler: Sampler | None = None
        if self._gpu_factory is not None:
            sampler = self._gpu_factory(self._post_gpu, self._pid_owner)
        elif self._gpu_default:
            sampler = default_gpu_sampler(self._post_gpu, self._pid_owner, lambda: self.supervisor.layout)
        if sampler is not None:
            self._gpu = sampler
            sampler.start()
        else:
            self.app.post_message(GpuArrived(GpuSample(False, "GPU sampling off", (), (), 0.0)))

    async def _supervise(self) -> None:
        """Adopt, start, then run the supervisor; if any of it fails, the App shows the error (a dashboard
        reading "3 stopped" after a dead supervisor would look like all is well)."""
        try:
            try:
                await self.supervisor.adopt()
                self._post_statuses()
                if self._feed is not None and self._gpu_from_feed and not self._feed.feeds_gpu:
                    self._start_gpu()  # a supervisor that samples no GPUs (VTUI_SUPERVISOR_GPU=0)
                if self.autostart:
                    await self.supervisor.start()
            except PreflightError as exc:
                for problem in exc.problems:
                    self.app.post_message(NoticeArrived(Notice(None, "error", f"preflight: {problem}")))
            self._post_statuses()
            await self.supervisor.run()
        except Exception as exc:  # noqa: BLE001 — the supervisor is gone: say so, never swallow it in a worker
            self.app.post_message(SupervisorFailed(f"{type(exc).__name__}: {exc}"))

    def stop_sources(self) -> None:
        """Stop the GPU thread (the app is going away; the supervisor is not ours to stop here)."""
        if self._gpu is not None:
            self._gpu.stop()
            self._gpu = None
        if isinstance(self.supervisor, HostFeed):
            self.supervisor.drop_links()

    async def close(self, stop_instances: bool = False) -> None:
        if self._unsubscribe:
            self._unsubscribe()
            self._unsubscribe = None
        for unsubscribe in self._unsubscribe_more:
            unsubscribe()
        self._unsubscribe_more = []
        if self._gpu is not None:
            await asyncio.to_thread(self._gpu.stop)
            self._gpu = None
        await self.supervisor.close(stop_instances=stop_instances)

    # -- events --------------------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        if isinstance(event, LogLines):
            self.logs.add(event.instance, event.lines)
            return
        self._flush_telemetry()  # the lines that led to a state change reach the store before it
        if isinstance(event, Notice):
            self.app.post_message(NoticeArrived(event))
        if not isinstance(event, Notice) or (
            self._feed is None and gone(event, {st.name for st in self.supervisor.status()})
        ):
            self._post_statuses()

    def _post_logs(self, instance: str, lines: tuple[str, ...], skipped: int) -> None:
        """A coalesced batch (the coalescer may flush from another thread): sent with the next batch."""
        if self._loop is None:
            self.app.post_message(LogsArrived(instance, lines, skipped))
            return
        with self._batch_lock:
            self._log_batches.append((instance, lines, skipped))
            armed, self._armed = self._armed, True
        if not armed:
            self._arm()

    def _queue_sample(self, sample: MetricsSample) -> None:
        with self._batch_lock:
            self._samples.append(sample)
            armed, self._armed = self._armed, True
        if not armed:
            self._arm()

    def _arm(self) -> None:
        """Send the batch on the loop's next turn (what arrives meanwhile goes with it)."""
        loop = self._loop
        assert loop is not None
        if threading.get_ident() == self._loop_thread:  # the feed's own loop: no wake-up pipe write
            loop.call_soon(self._send_batch)
            return
        try:
            loop.call_soon_threadsafe(self._send_batch)
        except RuntimeError:  # the loop is closed: the app is going away
            pass

    def _send_batch(self) -> None:
        with self._batch_lock:
            samples, logs = self._samples, self._log_batches
            self._samples, self._log_batches, self._armed = [], [], False
        if samples or logs:
            self.app.post_message(TelemetryBatch(tuple(samples), tuple(logs)))

    def _flush_telemetry(self) -> None:
        """Everything pending, now (before a state change: the lines and samples before it go first)."""
        self.logs.flush()
        self._send_batch()

    def _post_gpu(self, sample: GpuSample) -> None:  # from the sampler's thread
        self.app.post_message(GpuArrived(sample))

    def _on_telemetry(self, kind: str, sample: Any) -> None:
        if kind == "sample":  # the feed batches them already (the supervisor: a few writes a second)
            self._queue_sample(sample)
        elif kind == "history":
            self.app.post_message(MetricsBackfill(sample))
        elif kind == "gpu" and self._gpu_from_feed:
            self.app.post_message(GpuArrived(sample))
        elif kind == "host_gpu":  # another host's GPUs (its supervisor samples them)
            self.app.post_message(GpuArrived(sample.sample, host=sample.host))

    def _post_hosts(self) -> None:
        assert isinstance(self.supervisor, HostFeed)
        self.app.post_message(HostsChanged(self.supervisor.hosts()))

    def _post_statuses(self) -> None:
        self._flush_telemetry()  # whatever path statuses come by, the lines before them go first
        statuses = self.supervisor.status()
        self.app.post_message(StatusesChanged(statuses))

    def _pid_owner(self) -> Mapping[int, str]:
        """pid -> instance, called from the GPU sampler's thread (process-tree walks stay off the UI loop)."""
        owners: dict[int, str] = {}
        refresh = getattr(self.supervisor, "refresh_pids", None)
        if refresh is not None:
            refresh()  # the session supervisor's process trees (this runs in the sampler's thread)
        for st in self.supervisor.status():
            if st.state.running:
                try:
                    for pid in self.supervisor.pids_of(st.name):
                        owners[pid] = st.name
                except KeyError:  # gone from the layout since status(): attribute the rest
                    continue
        return owners
