"""Each instance's operation queue (`supervisor.opqueue`), made on first use and kept while the
supervisor runs: what it reports (`OperationChanged`, the operation in a status snapshot) and what a
stop does to a launch not yet spawned (cancels it: not worth waiting for)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from vtui.core.clock import Clock
from vtui.core.events import Event, OperationChanged
from vtui.core.instance import Instance
from vtui.core.status import InstanceStatus, status_of
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.opqueue import OperationQueue
from vtui.supervisor.roster import Roster

__all__ = ["Operations"]


class Operations:
    def __init__(self, roster: Roster, clock: Clock, emit: Callable[[Event], None]) -> None:
        self._roster = roster
        self._clock = clock
        self._emit = emit
        self._queues: dict[str, OperationQueue] = {}

    def queue(self, name: str) -> OperationQueue:
        """`name`'s operation queue."""
        queue = self._queues.get(name)
        if queue is None:

            def changed() -> None:
                running, waiting = self._queues[name].snapshot()
                self._emit(OperationChanged(name, running, waiting, self._clock.time()))

            def preempt() -> None:  # a stop waits: a launch not yet spawned is not worth waiting for
                pending = self._roster.pending.get(name)
                if pending is not None:
                    pending.cancel()

            queue = self._queues[name] = OperationQueue(name, on_change=changed, preempt=preempt)
        return queue

    def idle(self, name: str) -> bool:
        """Nothing runs or waits for `name` (a queue never made is idle)."""
        queue = self._queues.get(name)
        return queue is None or queue.idle

    def busy(self) -> bool:
        """An operation runs or waits for some instance."""
        return any(not queue.idle for queue in self._queues.values())

    def status(self, inst: Instance[ProcessHandle]) -> InstanceStatus:
        """`inst`'s snapshot, with the operation running and the one waiting."""
        status = status_of(inst)
        queue = self._queues.get(inst.spec.name)
        if queue is None or queue.idle:
            return status
        running, waiting = queue.snapshot()
        return dataclasses.replace(status, operation=running, waiting=waiting)

    async def close(self) -> None:
        """Cancel what waits and what runs, queue by queue (the supervisor closes)."""
        for queue in list(self._queues.values()):
            await queue.close()
