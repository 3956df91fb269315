"""What the parts of the session service (`server.SessionService`) share: its log line, the set of
tasks it spawned (kept until done, so none is collected mid-flight), and `ServiceContext`, what the route
handlers (`handlers.Routes`) ask of the service that holds them."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import deque
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from vtui.core.flagspec import FlagTable
from vtui.core.model import Layout
from vtui.service.broadcast import Broadcaster
from vtui.service.eventhub import EventHub
from vtui.service.exporter import MetricsEndpoint
from vtui.service.history import EventHistory
from vtui.service.notifications import Notifications
from vtui.service.persisted import ServiceState
from vtui.supervisor.supervisor import Supervisor


class Tasks:
    """The tasks a part of the service started: referenced until they end, cancelled together."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)


class ServiceContext(Protocol):
    """The session service as its route handlers see it."""

    supervisor: Supervisor
    session: str
    events: EventHistory
    flag_table: FlagTable | None

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...

    def status(self, brief: bool = False) -> dict[str, Any]: ...

    def samples_of(self, name: str) -> list[dict[str, Any]]: ...

    def pids(self) -> dict[str, list[int]]: ...

    def bring_up_attached(self, names: list[str] | None, up: bool = True) -> None: ...

    async def apply_layout(self, layout: Layout, flags: FlagTable | None, path: str) -> str: ...

    async def shutdown(self, stop_instances: bool = False) -> None: ...


def log(message: str) -> None:
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} vtui supervisor[{os.getpid()}]: {message}",
        file=sys.stderr,
        flush=True,
    )


class ServiceBase:
    """The state the remaining mixins of `SessionService` share (being taken apart into collaborators)."""

    supervisor: Supervisor
    session: str
    layout_path: str | None
    socket_file: Path
    state_file: Path
    idle_grace: float
    scrape: bool
    gpu: bool
    scrape_interval: float
    started_at: float
    events: EventHistory
    feed: Broadcaster
    hub: EventHub
    state: ServiceState
    notifications: Notifications
    samples: dict[str, deque[dict[str, Any]]]
    # the last sample of each instance, its encoding, and its feed line's halves around the time
    _encoded: dict[str, tuple[Any, dict[str, Any], tuple[bytes, bytes] | None]]
    last_gpu: dict[str, Any] | None
    _clients: int
    _last_client: float
    _scrapers: dict[str, tuple[str, Any, asyncio.Task]]
    _gpu_sampler: Any
    _server: asyncio.AbstractServer | None
    _done: asyncio.Event
    _tasks: Tasks
    _loop: asyncio.AbstractEventLoop | None
    _exporter: MetricsEndpoint | None
    flag_table: FlagTable | None  # what the layout's flags were checked with (None: the bundled one)

    if TYPE_CHECKING:  # defined by the mixins and SessionService

        def _sync_scrapers(self) -> None: ...

        async def _configure_exporter(self) -> None: ...

        def _pids(self) -> dict[str, list[int]]: ...

        def status(self, brief: bool = False) -> dict[str, Any]: ...

        async def handle(
            self, method: str, target: str, body: dict[str, Any], api: int | None = None
        ) -> tuple[int, dict[str, Any]]: ...

        def _write_registration(self) -> None: ...

        def _bring_up_attached(self, names: list[str] | None, up: bool = True) -> None: ...

        async def shutdown(self, stop_instances: bool = False) -> None: ...

    def _spawn(self, coro: Any) -> asyncio.Task:
        return self._tasks.spawn(coro)
