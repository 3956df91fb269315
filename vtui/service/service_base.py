"""The state every part of `service.server.SessionService` shares: the service is one class put
together from mixins, one module per concern (`broadcast`: events, notifications, the feed's messages,
persisted facts and flag history; `scraping`: metrics scrapes, the GPU sampler, the Prometheus endpoint;
`handlers`: the socket API's requests; `transport`: HTTP/1.1 on the socket and the streamed feed).
`ServiceBase` declares what `SessionService.__init__` sets and the methods one mixin calls on another.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vtui.core.events import Event
from vtui.core.flagspec import FlagTable
from vtui.service.exporter import MetricsEndpoint
from vtui.service.feed import FeedClient
from vtui.service.history import EventHistory
from vtui.supervisor.notify import Notifier
from vtui.supervisor.supervisor import Supervisor


class ServiceBase:
    supervisor: Supervisor
    session: str
    layout_path: str | None
    _file_names: set[str]
    socket_file: Path
    state_file: Path
    idle_grace: float
    scrape: bool
    gpu: bool
    scrape_interval: float
    started_at: float
    events: EventHistory
    samples: dict[str, deque[dict[str, Any]]]
    # the last sample of each instance, its encoding, and its feed line's halves around the time
    _encoded: dict[str, tuple[Any, dict[str, Any], tuple[bytes, bytes] | None]]
    last_gpu: dict[str, Any] | None
    facts: dict[str, dict[str, Any]]
    flag_history: dict[str, list[dict[str, Any]]]
    _feeds: set[FeedClient]
    _clients: int
    _last_client: float
    _scrapers: dict[str, tuple[str, Any, asyncio.Task]]
    _gpu_sampler: Any
    _server: asyncio.AbstractServer | None
    _done: asyncio.Event
    _tasks: set[asyncio.Task]
    _loop: asyncio.AbstractEventLoop | None
    notifier: Notifier | None
    _troubled: set[str]
    _exporter: MetricsEndpoint | None
    attached_up: set[str]
    flag_table: FlagTable | None  # what the layout's flags were checked with (None: the bundled one)
    tunes: dict[str, Any]  # instance -> its last vtui.tune.job.TuneJob (`tuning`)
    _tune_tasks: dict[str, asyncio.Task]

    if TYPE_CHECKING:  # defined by the mixins and SessionService

        def _on_event(self, event: Event) -> None: ...

        def _broadcast(self, message: dict[str, Any]) -> None: ...

        def _broadcast_line(self, line: bytes, held: bool = False) -> None: ...

        def _broadcast_status(self) -> None: ...

        def _save_state(self) -> None: ...

        def _edits_changed(self, name: str) -> None: ...

        def _statuses(self) -> list[dict[str, Any]]: ...

        def _sync_scrapers(self) -> None: ...

        async def _configure_exporter(self) -> None: ...

        async def _fresh_gpu(self) -> None: ...

        def _pids(self) -> dict[str, list[int]]: ...

        def status(self, brief: bool = False) -> dict[str, Any]: ...

        async def handle(
            self, method: str, target: str, body: dict[str, Any], api: int | None = None
        ) -> tuple[int, dict[str, Any]]: ...

        def _write_registration(self) -> None: ...

        def _bring_up_attached(self, names: list[str] | None, up: bool = True) -> None: ...

        def _one_name(self, body: dict[str, Any]) -> str: ...

        async def _end_tunes(self) -> None: ...

        async def shutdown(self, stop_instances: bool = False) -> None: ...

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def log(message: str) -> None:
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} vtui supervisor[{os.getpid()}]: {message}",
        file=sys.stderr,
        flush=True,
    )
