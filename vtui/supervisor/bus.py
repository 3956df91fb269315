"""The supervisor's event bus: every event of its instances goes through `emit`, first to the supervisor's
own parts (`hook`: run records, router membership, `wait_settled`; their errors are the supervisor's),
then to the consumers that `subscribe`d (a broken consumer is reported and skipped, never stops
supervision)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from vtui.core.events import Event, Notice, subscribe_to

__all__ = ["EventBus"]

Listener = Callable[[Event], None]


class EventBus:
    def __init__(self) -> None:
        self._hooks: list[Listener] = []
        self._subscribers: list[Listener] = []

    def hook(self, listener: Listener) -> None:
        """A part of the supervisor that must see each event before any consumer does."""
        self._hooks.append(listener)

    def subscribe(self, callback: Listener) -> Callable[[], None]:
        """A consumer of the events; the function returned unsubscribes it."""
        return subscribe_to(self._subscribers, callback)

    def emit(self, event: Event) -> None:
        for hook in self._hooks:
            hook(event)
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception as exc:  # noqa: BLE001 — a broken consumer must not stop supervision
                print(f"vtui: event subscriber failed: {exc!r}", file=sys.stderr)

    def notice(self, instance: str | None, level: str, text: str) -> None:
        self.emit(Notice(instance, level, text))
