"""Router membership of replica groups (`supervisor.replicas.RouterHub`) kept up to date: reconciled
when a member's state changes and every `RECONCILE_EVERY_S` (a router restarted, an add that failed),
one reconcile of a group at a time (a change during one runs another after it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from vtui.core.events import Event, StateChanged
from vtui.core.instance import Instance
from vtui.core.state import State
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.replicas import RECONCILE_EVERY_S, RouterHub

__all__ = ["Membership"]


class Membership:
    def __init__(
        self,
        routers: RouterHub,
        instances: Mapping[str, Instance[ProcessHandle]],
        notice: Callable[[str | None, str, str], None],
    ) -> None:
        self.routers = routers
        self._instances = instances
        self._notice = notice
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._at = 0.0  # when every group was last reconciled

    def on_event(self, event: Event) -> None:
        """A member's state changed: its group's router follows."""
        if not isinstance(event, StateChanged):
            return
        inst = self._instances.get(event.instance)
        if inst is not None and inst.spec.group is not None:
            if event.new is State.STARTING:
                self.routers.started(event.instance)
            self.soon(inst.spec.group)

    def tick(self, now: float) -> None:
        """Every group again once `RECONCILE_EVERY_S` has passed since the last round."""
        if not 0 <= now - self._at < RECONCILE_EVERY_S:
            self._at = now
            for group in self.routers.groups():
                self.soon(group)

    def soon(self, group: str) -> None:
        """Bring the group's router to its READY replicas (nothing without a running loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        task = self._tasks.get(group)
        if task is not None and not task.done():
            self._again.add(group)
            return

        async def run() -> None:
            while True:
                self._again.discard(group)
                try:
                    await self.routers.reconcile(group)
                except Exception as exc:  # noqa: BLE001 — membership is retried on the next tick
                    self._notice(None, "warning", f"{group}: router membership update failed: {exc!r}")
                if group not in self._again:
                    return

        self._tasks[group] = asyncio.create_task(run())

    def tasks(self) -> list[asyncio.Task[None]]:
        return list(self._tasks.values())

    async def aclose(self) -> None:
        """After the reconciles were cancelled and awaited: forget them, close the routers' client."""
        self._tasks.clear()
        await self.routers.aclose()
