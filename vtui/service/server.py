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

The class is put together from mixins (`service_base`, `broadcast`, `scraping`, `handlers`,
`transport`); this module has construction, registration, idleness, `serve` and `shutdown`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

from vtui.core.atomic import atomic_write_text
from vtui.core.flagspec import FlagTable
from vtui.core.model import Layout
from vtui.core.state import State
from vtui.service import locations
from vtui.service.broadcast import Broadcaster
from vtui.service.eventhub import EventHub
from vtui.service.handlers import HandlerMixin
from vtui.service.notifications import Notifications
from vtui.service.persisted import ServiceState
from vtui.service.probes import LeanLauncher
from vtui.service.scraping import ScrapeMixin
from vtui.service.service_base import Tasks, log
from vtui.service.transport import TransportMixin
from vtui.supervisor.attached import Attached
from vtui.supervisor.notify import Notifier
from vtui.supervisor.supervisor import Supervisor

__all__ = ["SessionService"]


class SessionService(ScrapeMixin, HandlerMixin, TransportMixin):
    """One session's supervision plus its socket server. `serve()` runs until `shutdown()` or idleness."""

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
        self.supervisor = supervisor or Supervisor(layout, launcher=LeanLauncher(), adopt_unlisted=True)
        self.session = self.supervisor.session
        self.layout_path = str(layout.path) if layout.path else None
        self.socket_file = socket_file or locations.socket_path(self.session)
        self.state_file = locations.paths.state_dir() / f"{locations._safe(self.session)}.service.json"
        self.idle_grace = idle_grace
        self.scrape = scrape
        self.gpu = gpu
        self.scrape_interval = scrape_interval
        self.flag_table = flags  # the instances' vLLMs' flags, as the layout was loaded with
        self.started_at = time.time()
        self._tasks = Tasks()
        self.samples = {}
        self._encoded = {}
        self.last_gpu = None
        self._clients = 0
        self._last_client = time.monotonic()
        self._scrapers = {}
        self._gpu_sampler = None
        self._server = None
        self._done = asyncio.Event()
        self._loop = None
        self._exporter = None  # [session] metrics_port
        # facts, flag history, attached servers brought up, pending edits: persisted
        self.state = ServiceState(self.state_file, self.supervisor.edits, self._spawn, log)
        self.state.load()
        self.feed = Broadcaster()
        self.notifications = Notifications(
            self.session, lambda: self.supervisor.instances, Notifier.from_session(layout.session, log=log)
        )
        self.hub = EventHub(
            self.supervisor, self.feed, self.state, self.notifications, self._spawn, self._sync_scrapers
        )
        self.events = self.hub.history
        self.supervisor.edits.on_change = self.hub.edits_changed  # persisted and broadcast
        self.supervisor.subscribe(self.hub.on_event)

    def _write_registration(self) -> None:
        info = {
            "session": self.session,
            "pid": os.getpid(),
            "layout_path": self.layout_path,
            "socket": str(self.socket_file),
            "started_at": self.started_at,
        }
        atomic_write_text(locations.info_path(self.session), json.dumps(info), mode=0o600)

    def _busy(self) -> bool:
        """Something of the session's own runs, or an attached server was brought up and not taken down
        since (whatever its state: an unreachable one is watched for its return)."""
        sup = self.supervisor
        return (
            bool(sup._pending)
            or any(
                (i.state.running or i.state is State.BACKOFF) and not isinstance(i, Attached)
                for i in sup.instances.values()
            )
            or any(isinstance(sup.instances.get(n), Attached) for n in self.state.attached_up)
        )

    def _bring_up_attached(self, names: list[str] | None, up: bool = True) -> None:
        """`/start` (up) or `/stop` (not) of these names (None: every instance): its attached servers
        keep the supervisor up from now on, or no longer."""
        asked = self.supervisor.resolve(names) if names is not None else list(self.supervisor.instances)
        attached = {n for n in asked if isinstance(self.supervisor.instances.get(n), Attached)}
        self.state.set_attached_up(attached, up)

    async def _idle_watch(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, max(0.05, self.idle_grace / 4)))
            if self._busy() or self._clients > 0:
                self._last_client = time.monotonic()
            elif time.monotonic() - self._last_client >= self.idle_grace:
                await self.shutdown()
                return

    async def serve(self) -> None:
        """Adopt what runs, bind the socket, supervise until shutdown."""
        self._loop = asyncio.get_running_loop()
        await self.supervisor.adopt()
        for st in self.supervisor.status():  # adopted READY ones: facts persisted, else from the log
            if st.state is State.READY and st.name not in self.state.facts:
                self._spawn(self.hub.facts_from_log(st.name))
        self._sync_scrapers()
        self._start_gpu()
        self.socket_file.unlink(missing_ok=True)
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._connection, path=str(self.socket_file))
        finally:
            os.umask(old)
        os.chmod(self.socket_file, 0o600)
        self._write_registration()
        await self._configure_exporter()
        watch = self._spawn(self._idle_watch())
        runner = self._spawn(self.supervisor.run())
        try:
            await self._done.wait()
        finally:
            watch.cancel()
            runner.cancel()

    async def shutdown(self, stop_instances: bool = False) -> None:
        if self._done.is_set():
            return
        if stop_instances:
            await self._stop(None, None)
        if self._server is not None:
            self._server.close()
        self.feed.end_all()
        for _, loop, task in self._scrapers.values():
            loop.stop()
            task.cancel()
        self._scrapers.clear()
        if self._exporter is not None:
            await self._exporter.stop()
            self._exporter = None
        if self._gpu_sampler is not None:
            await asyncio.to_thread(self._gpu_sampler.stop)
        await self.supervisor.close()
        await self.notifications.close()
        with contextlib.suppress(OSError):
            info = json.loads(locations.info_path(self.session).read_text())
            if info.get("pid") == os.getpid():
                locations.info_path(self.session).unlink()
                self.socket_file.unlink(missing_ok=True)
        self._done.set()
