"""What the parts of the session service (`server.SessionService`) share: its log line, the set of
tasks it spawned (kept until done, so none is collected mid-flight), and `ServiceContext`, what the route
handlers (`handlers.Routes`) ask of the service that holds them."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from vtui.core.flagspec import FlagTable
from vtui.core.model import Layout
from vtui.service.history import EventHistory
from vtui.supervisor.supervisor import Supervisor

if TYPE_CHECKING:
    from vtui.service.gpuwatch import GpuWatch
    from vtui.service.tuning import Tunes


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
    gpu_watch: GpuWatch  # a full status asks it for a fresh sample
    tunes: Tunes  # the tune routes' jobs

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
