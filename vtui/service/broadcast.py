"""The feed's sending side: the clients attached to `GET /feed` and what goes to all of them. Telemetry
(metrics and GPU samples, log lines) is held and leaves together, at most every FEED_BATCH_S; anything
else (status, lifecycle events, facts) leaves at once, after what was held."""

from __future__ import annotations

import asyncio
from typing import Any

from vtui.service.feed import FeedClient
from vtui.service.history import HeldLines
from vtui.service.wire import feed_line

# Telemetry (metrics and GPU samples, log lines) goes to the feeds' clients together, at most this often:
# a dashboard wakes for it a few times a second, not once per sample and per line of each instance (it
# draws them at 1 Hz). Anything else (status, lifecycle events, facts) goes at once, after what is held.
FEED_BATCH_S = 0.25
_HELD_KINDS = frozenset({"sample", "gpu"})


class Broadcaster:
    """The feed clients of one service and the telemetry held for their next write."""

    def __init__(self, batch_s: float = FEED_BATCH_S) -> None:
        self.batch_s = batch_s
        self.feeds: set[FeedClient] = set()
        self._held: list[bytes] | None = None  # telemetry lines waiting for the next flush (None: none armed)
        self._held_lines: dict[str, HeldLines] | None = None  # log lines by instance, sent as one event each
        self._held_timer: asyncio.TimerHandle | None = None

    def __bool__(self) -> bool:
        """Anyone listening (nobody: nothing is encoded or held for the feed)."""
        return bool(self.feeds)

    def add(self, feed: FeedClient) -> None:
        self.feeds.add(feed)

    def discard(self, feed: FeedClient) -> None:
        self.feeds.discard(feed)

    def end_all(self) -> None:
        for feed in list(self.feeds):
            feed.end()

    def broadcast(self, message: dict[str, Any]) -> None:
        if self.feeds:
            self.broadcast_line(feed_line(message), held=message.get("type") in _HELD_KINDS)

    def broadcast_line(self, line: bytes, held: bool = False) -> None:
        """One feed line (JSON and its newline) to every client. `held`: telemetry (a sample, a GPU
        sample), held up to FEED_BATCH_S and sent with the others in one write; anything else first
        sends what is held (the lines that led to a state change go before it)."""
        if held:
            self._arm_flush().append(line)
            return
        self.flush_held()
        self._send(line)

    def hold_lines(self, instance: str, lines: tuple[str, ...]) -> None:
        """An instance's new log lines, for the next batch (nobody listening: nothing is held; a client
        attaching later reads /logs)."""
        if not self.feeds:
            return
        self._arm_flush()
        assert self._held_lines is not None
        held = self._held_lines.get(instance)
        if held is None:
            held = self._held_lines[instance] = HeldLines()
        held.extend(lines)  # bounded in bytes: a flood keeps its most recent lines, counts the rest

    @property
    def holding(self) -> bool:
        return self._held is not None

    def _arm_flush(self) -> list[bytes]:
        if self._held is None:
            self._held, self._held_lines = [], {}
            self._held_timer = asyncio.get_running_loop().call_later(self.batch_s, self.flush_held)
        return self._held

    def flush_held(self) -> None:
        """Send what is held as one write: each instance's log lines as one event, then the samples."""
        held, lines = self._held, self._held_lines
        if held is None:
            return
        self._held = self._held_lines = None
        if self._held_timer is not None:
            self._held_timer.cancel()  # flushed early (a status went out): the next batch arms its own
            self._held_timer = None
        out = [
            feed_line({"type": "event", "event": _lines_event(name, batch)})
            for name, batch in (lines or {}).items()
        ]
        if self.feeds and (out or held):
            self._send(b"".join([*out, *held]))

    def _send(self, data: bytes) -> None:
        for feed in list(self.feeds):
            feed.put(data)  # a slow reader's feed ends itself (feed.FEED_BUFFER)


def _lines_event(name: str, held: HeldLines) -> dict[str, Any]:
    """A feed batch of one instance's lines; `omitted`: how many older ones the batch's byte bound left
    out (they are in the log file)."""
    event: dict[str, Any] = {"instance": name, "lines": list(held.lines), "kind": "lines"}
    if held.omitted:
        event["omitted"] = held.omitted
    return event
