"""Errors the layers above core raise and the session service maps to HTTP statuses: plain exception
classes, no I/O."""

from __future__ import annotations

__all__ = ["OperationConflict"]


class OperationConflict(Exception):
    """An operation asked of an instance while another one runs on it: refused, not queued behind it nor
    interleaved with it (the socket API answers 409). `running`: what runs now (restart, stop, sleep…);
    `asked`: what was refused, when known."""

    def __init__(self, instance: str, running: str, asked: str | None = None) -> None:
        what = f"{asked} refused: " if asked else ""
        super().__init__(f"{instance}: {what}a {running} is in progress (try again when it is done)")
        self.instance = instance
        self.running = running
        self.asked = asked
