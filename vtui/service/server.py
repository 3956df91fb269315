"""The session supervisor process: one per session, the owner of its instances.

It runs the core `Supervisor` (state machines, restart policy, adoption, stops), one `ScrapeLoop` per
READY instance, optionally the NVML `GpuSampler`, and keeps bounded histories: an hour of 1 Hz metrics
samples per instance, the recent events, the startup facts, the flag history and the dashboards' pending
flag edits of each instance (persisted next to the run records, so a successor gets them back). Clients
talk HTTP/1.1 (h11) on `<state dir>/<session>.sock` (0600 in the 0700 state dir), through
`service.client`; the routes, each with what it does, are `schema.ROUTES`.

With `[session] metrics_port` it also serves the session's Prometheus `GET /metrics` on TCP
(`service.exporter`, bound to `metrics_host`, 127.0.0.1 by default). Attached servers (engine =
"external") are watched and scraped like the others, never started or stopped (`/stop` lists them under
"attached"). Once brought up (`/start` names them, as `vtui up` does) they keep the supervisor up, with
nothing else running and no client, until `/stop` names them (`vtui down`): otherwise nobody would watch
them. That intent is persisted, so a successor keeps it.

Crash-only: everything it must not forget is on disk before it matters (run records are written ahead
of each spawn), so `kill -9` loses nothing but the sample history. It exits by itself once no instance
runs, no attached server is up, and no client has been connected for `idle_grace` seconds.

`SessionService` is a thin facade over small parts, each with its own state: `persisted.ServiceState`
(what a successor gets back), `broadcast.Broadcaster` (the feed's clients, telemetry batched),
`eventhub.EventHub` (the supervisor's events: history, feed, flag history, facts), `notifications`
(on_event / webhooks), `scraping.Scrapers` (the scrape loops and samples), `gpuwatch.GpuWatch` (the GPU
sampler, the instances' processes), `exporter.SessionMetrics` (`metrics_port`), `tuning.Tunes` (tune
jobs), `handlers.Routes` (the API's routes), `transport.SocketServer` (h11 on the socket) and
`idle.IdleWatch`. This module wires them and has registration, `serve` and `shutdown`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from vtui.core import paths
from vtui.core.atomic import atomic_write_text
from vtui.core.flagspec import FlagTable
from vtui.core.model import Layout
from vtui.core.state import State
from vtui.service import locations
from vtui.service.api import API_VERSION, VTUI_VERSION
from vtui.service.broadcast import Broadcaster
from vtui.service.eventhub import EventHub
from vtui.service.exporter import SessionMetrics
from vtui.service.gpuwatch import GpuWatch
from vtui.service.handlers import Routes
from vtui.service.idle import IdleWatch, busy
from vtui.service.notifications import Notifications
from vtui.service.persisted import ServiceState
from vtui.service.probes import LeanLauncher
from vtui.service.scraping import Scrapers
from vtui.service.service_base import Tasks, log
from vtui.service.transport import SocketServer
from vtui.service.tuning import Tunes
from vtui.supervisor.attached import Attached
from vtui.supervisor.notify import Notifier
from vtui.supervisor.supervisor import Supervisor

__all__ = ["SessionService"]


class SessionService:
    """One session's supervision plus its socket server. `serve()` runs until `shutdown()` or idleness."""

    metrics: SessionMetrics  # set after the GPU watch that asks it whether it serves

    def __init__(
        self,
        layout: Layout,
        *,
        supervisor: Supervisor | None = None,
        socket_file: Path | None = None,
        idle_grace: float = 30.0,
        scrape: bool = True,
        gpu: bool = False,
        scrape_interval: float = 1.0,
        flags: FlagTable | None = None,
    ) -> None:
        self.feed = Broadcaster()
        if supervisor is None:
            supervisor = Supervisor(layout, launcher=LeanLauncher(), adopt_unlisted=True)
            # quiet and unwatched: the supervisor's log drain and liveness checks once a second, with the
            # probes, not five times (supervisor_tick.Ticker.quiet); a feed client brings 5 Hz back
            supervisor.idle_poll_interval = 1.0
            supervisor.watched = lambda: bool(self.feed)
        self.supervisor = supervisor
        self.session = self.supervisor.session
        self.layout_path = str(layout.path) if layout.path else None
        self.socket_file = socket_file or locations.socket_path(self.session)
        self.state_file = paths.state_dir() / f"{locations._safe(self.session)}.service.json"
        self.flag_table = flags  # the instances' vLLMs' flags, as the layout was loaded with
        self.started_at = time.time()
        self._tasks = Tasks()
        self._done = asyncio.Event()
        sup = self.supervisor
        # facts, flag history, attached servers brought up, pending edits: persisted
        self.state = ServiceState(self.state_file, sup.edits, self.spawn, log)
        self.state.load()
        self.scrapers = Scrapers(sup, self.feed, self.spawn, log, enabled=scrape, interval=scrape_interval)
        # unwatched (no feed client, no /metrics endpoint), the GPU sampler rests
        self.gpu_watch = GpuWatch(
            sup, self.feed, enabled=gpu, exporting=lambda: self.metrics.endpoint is not None
        )
        notifier = Notifier.from_session(layout.session, log=log)
        self.notifications = Notifications(self.session, lambda: sup.instances, notifier)
        self.hub = EventHub(sup, self.feed, self.state, self.notifications, self.spawn, self.scrapers.sync)
        self.events = self.hub.history
        self.metrics = SessionMetrics(
            sup.status,
            self.scrapers.payloads,
            self.gpu_watch.for_export,
            log=log,
            on_event=self.hub.on_event,
            on_serving=self._exporting,
        )
        self.tunes = Tunes(
            sup, self.session, self.feed, self.spawn, lambda: self.flag_table, log, lambda: self.layout_path
        )
        self.routes = Routes(self)
        self.server = SocketServer(
            self.socket_file, self.routes.handle, self.status, self.feed, on_feed=self._feed_came
        )
        self.idle = IdleWatch(
            idle_grace,
            # a live tune too: between a trial's stop and its start nothing else runs
            lambda: busy(sup, self.state.attached_up) or self.tunes.running,
            lambda: self.server.clients,
        )
        self.server.on_close = self.idle.touch
        sup.edits.on_change = self.hub.edits_changed  # persisted and broadcast
        sup.subscribe(self.hub.on_event)

    # -- what the routes ask of the service (`service_base.ServiceContext`) ----------------------------
    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return self._tasks.spawn(coro)

    def status(self, brief: bool = False) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "session": self.session,
            "supervisor_pid": os.getpid(),
            "layout_path": self.layout_path,
            "started_at": self.started_at,
            "api_version": API_VERSION,
            "vtui_version": VTUI_VERSION,
        }
        if not brief:
            answer["instances"] = self.hub.statuses()
            answer["flag_history"] = self.state.flag_history
            answer["gpu"] = self.gpu_watch.last
            answer["gpu_sampling"] = (
                self.gpu_watch.enabled
            )  # the feed carries GPU samples (clients run no sampler)
            answer["pending"] = self.supervisor.pending_edits()  # dashboards' unapplied flag edits
            answer["pending_conflicts"] = {  # their flags another client changed too (core.pending)
                name: [c.to_dict() for c in conflicts]
                for name, conflicts in self.supervisor.pending_conflicts().items()
            }
        return answer

    def samples_of(self, name: str) -> list[dict[str, Any]]:
        return list(self.scrapers.samples.get(name, ()))

    def pids(self) -> dict[str, list[int]]:
        return self.gpu_watch.pids()

    def bring_up_attached(self, names: list[str] | None, up: bool = True) -> None:
        """`/start` (up) or `/stop` (not) of these names (None: every instance): its attached servers
        keep the supervisor up from now on, or no longer."""
        asked = self.supervisor.resolve(names) if names is not None else list(self.supervisor.instances)
        attached = {n for n in asked if isinstance(self.supervisor.instances.get(n), Attached)}
        self.state.set_attached_up(attached, up)

    async def apply_layout(self, layout: Layout, flags: FlagTable | None, path: str) -> str:
        """A new layout of this session (checked by `/layout`): supervised from now on, its notifier,
        registration and metrics endpoint in place, the new statuses sent. Its path as registered."""
        self.supervisor.set_layout(layout)
        self.flag_table = flags
        self.notifications.replace(Notifier.from_session(layout.session, log=log))
        self.hub.file_names = set(self.supervisor.resolve(layout.names()))
        self.layout_path = str(layout.path) if layout.path else path
        self._write_registration()
        await self.metrics.configure(layout.session)
        self.hub.broadcast_status()
        return self.layout_path

    async def handle(
        self, method: str, target: str, body: dict[str, Any], api: int | None = None
    ) -> tuple[int, dict[str, Any]]:
        return await self.routes.handle(method, target, body, api)

    # -- life ----------------------------------------------------------------------------------------
    def _feed_came(self) -> None:
        """A feed client: the supervisor's logs at 5 Hz again (supervisor_loops._quiet), and the GPUs,
        unsampled while nobody followed, sampled for it now."""
        self.supervisor.wake_tick()
        self.gpu_watch.poke()

    def _exporting(self, serving: bool) -> None:
        self.scrapers.keep_text = serving  # the endpoint reads the loops' last payloads
        self.scrapers.sync()

    def _write_registration(self) -> None:
        info = {
            "session": self.session,
            "pid": os.getpid(),
            "layout_path": self.layout_path,
            "socket": str(self.socket_file),
            "started_at": self.started_at,
        }
        atomic_write_text(locations.info_path(self.session), json.dumps(info), mode=0o600)

    async def serve(self) -> None:
        """Adopt what runs, bind the socket, supervise until shutdown."""
        await self.supervisor.adopt()
        for st in self.supervisor.status():  # adopted READY ones: facts persisted, else from the log
            if st.state is State.READY and st.name not in self.state.facts:
                self.spawn(self.hub.facts_from_log(st.name))
        self.scrapers.sync()
        self.gpu_watch.start()
        await self.server.start()
        self._write_registration()
        await self.metrics.configure(self.supervisor.layout.session)
        watch = self.spawn(self.idle.run(self.shutdown))
        runner = self.spawn(self.supervisor.run())
        try:
            await self._done.wait()
        finally:
            watch.cancel()
            runner.cancel()

    async def shutdown(self, stop_instances: bool = False) -> None:
        if self._done.is_set():
            return
        await self.tunes.end()  # each puts its instance's original flags back first
        if stop_instances:
            await self.routes._stop(None, None)
        self.server.close()
        self.feed.end_all()
        self.scrapers.stop()
        await self.metrics.stop()
        await self.gpu_watch.stop()
        await self.supervisor.close()
        await self.notifications.close()
        with contextlib.suppress(OSError):
            info = json.loads(locations.info_path(self.session).read_text())
            if info.get("pid") == os.getpid():
                locations.info_path(self.session).unlink()
                self.socket_file.unlink(missing_ok=True)
        self._done.set()
