"""The supervisor's long-lived loops (the tick, the health probes, the attached servers' probes),
started on first use and re-armed each only after its previous round finished; waiting until
instances settle, and until the supervisor closes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

from vtui.core.events import Event, OperationChanged, StateChanged
from vtui.core.state import State
from vtui.supervisor.operations import Operations
from vtui.supervisor.roster import Roster
from vtui.supervisor.supervisor_probe import Prober
from vtui.supervisor.supervisor_tick import Ticker

__all__ = ["Loops"]


class Loops:
    def __init__(self, roster: Roster, operations: Operations, ticker: Ticker, prober: Prober) -> None:
        self._roster = roster
        self._operations = operations
        self._ticker = ticker
        self._prober = prober
        self.tasks: list[asyncio.Task[None]] = []
        self._changed: asyncio.Event | None = None  # a state or an operation changed
        self._closed: asyncio.Event | None = None

    def ensure(self) -> None:
        """The loops run (on the running event loop)."""
        if self.tasks:
            return
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self.tasks = [
            asyncio.create_task(self._ticker.loop()),
            asyncio.create_task(self._prober.health_loop()),
            asyncio.create_task(
                self._prober.attached_loop()
            ),  # its own loop: a slow remote URL delays no probe
        ]

    def on_event(self, event: Event) -> None:
        if isinstance(event, (OperationChanged, StateChanged)) and self._changed is not None:
            self._changed.set()  # `wait_settled` waits for the queue too
        if isinstance(event, StateChanged):
            self._ticker.wake()  # a quiet tick's rest ends: the instance is on its way somewhere

    async def wait_settled(self, names: Iterable[str] | None, timeout: float | None) -> dict[str, State]:
        """Until each named instance is READY, FAILED, STOPPED or CRASHED with no restart coming."""
        wanted = self._roster.names(names)
        self.ensure()
        changed = self._changed
        assert changed is not None
        instances = self._roster.instances

        def settled(name: str) -> bool:  # one gone meanwhile (a replica scaled away) waits for nothing
            inst = instances.get(name)
            idle = self._operations.idle(name)
            return inst is None or (inst.settled and name not in self._roster.pending and idle)

        async def settle() -> None:
            while not all(settled(n) for n in wanted):
                changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), 1.0)

        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(settle(), timeout)
        return {n: instances[n].state for n in wanted if n in instances}

    async def run(self) -> None:
        """Until `closed`."""
        self.ensure()
        assert self._closed is not None
        await self._closed.wait()

    def closed(self) -> None:
        """The supervisor closed (its loops were cancelled and awaited): `run` returns."""
        self.tasks = []
        if self._closed is not None:
            self._closed.set()
