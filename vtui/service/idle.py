"""When the session supervisor has nothing left to do: no instance of its own runs (or waits to, or is
being launched), no attached server was brought up and left up, and no client has been connected for
`grace` seconds. `IdleWatch` decides on an injected clock; its loop asks it a few times a grace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

from vtui.core.state import State
from vtui.supervisor.attached import Attached
from vtui.supervisor.supervisor import Supervisor


def busy(supervisor: Supervisor, attached_up: Iterable[str]) -> bool:
    """Something of the session's own runs, or an attached server was brought up and not taken down
    since (whatever its state: an unreachable one is watched for its return)."""
    return (
        bool(supervisor._pending)
        or any(
            (i.state.running or i.state is State.BACKOFF) and not isinstance(i, Attached)
            for i in supervisor.instances.values()
        )
        or any(isinstance(supervisor.instances.get(n), Attached) for n in attached_up)
    )


class IdleWatch:
    def __init__(
        self,
        grace: float,
        busy: Callable[[], bool],
        clients: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.grace = grace
        self._busy = busy
        self._clients = clients
        self._clock = clock
        self.last_active = clock()  # the last time something ran or a client was connected

    def touch(self) -> None:
        """Activity now (a client's connection ended)."""
        self.last_active = self._clock()

    def due(self) -> bool:
        """Idle for the whole grace (busy or attached now: not, and the grace starts again)."""
        if self._busy() or self._clients() > 0:
            self.last_active = self._clock()
            return False
        return self._clock() - self.last_active >= self.grace

    async def run(self, on_idle: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(min(1.0, max(0.05, self.grace / 4)))
            if self.due():
                await on_idle()
                return
