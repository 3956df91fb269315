"""The session's `[session] on_event` / webhook notifications: which state change is worth telling, once
per change (a crash, a failure or a spent restart budget, a recovery after trouble, sleep and wake), said
through the layout's `supervisor.notify.Notifier` (None: the layout asks for none)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from vtui.core.events import StateChanged
from vtui.core.instance import Instance
from vtui.core.state import State
from vtui.supervisor import notify
from vtui.supervisor.handle import ProcessHandle


class Notifications:
    def __init__(
        self,
        session: str,
        instances: Callable[[], Mapping[str, Instance[ProcessHandle]]],
        notifier: notify.Notifier | None,
    ) -> None:
        self.session = session
        self._instances = instances
        self.notifier = notifier
        self.troubled: set[str] = set()  # crashed or unhealthy since their last READY (-> recovered)

    def replace(self, notifier: notify.Notifier | None) -> None:
        """A new layout's notifier (the old one's queue is dropped, its workers told to end)."""
        if self.notifier is not None:
            self.notifier.close(wait=0)
        self.notifier = notifier

    async def close(self) -> None:
        if self.notifier is not None:
            await asyncio.to_thread(self.notifier.close)

    def tell(self, event: StateChanged) -> None:
        """The notification a state change makes, if any."""
        name, new, old = event.instance, event.new, event.old
        kind: str | None = None
        details: dict[str, Any] = {"from": old.value, "to": new.value}
        inst = self._instances().get(name)
        if new is State.CRASHED:
            kind = notify.CRASHED
            self.troubled.add(name)
        elif new in (State.UNHEALTHY, State.UNREACHABLE):
            self.troubled.add(name)
        elif new is State.FAILED:
            budget = inst.spec.restart.max_restarts if inst is not None else 0
            spent = old is State.CRASHED and inst is not None and budget > 0 and inst.attempt >= budget
            kind = notify.RESTART_BUDGET_EXHAUSTED if spent else notify.FAILED
            details["restarts"] = inst.restarts if inst is not None else None
        elif new is State.READY and old is State.WAKING:
            kind = notify.WOKE
        elif new is State.READY and name in self.troubled:
            self.troubled.discard(name)
            kind = notify.RECOVERED
            details["restarts"] = inst.restarts if inst is not None else None
        elif new is State.ASLEEP and old is State.READY:
            kind = notify.ASLEEP
            details["level"] = inst.sleep_level if inst is not None else None
        elif new is State.STOPPED:
            self.troubled.discard(name)
        if kind is None or self.notifier is None:
            return
        self.notifier.notify(
            notify.NotifyEvent(kind, name, self.session, event.reason or "", event.at, details)
        )
