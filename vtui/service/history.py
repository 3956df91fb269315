"""The supervisor's memory of log output, bounded in bytes as well as in count: the recent events
(`EventHistory`, for `GET /events`) and the log lines held for the feed's next batch (`HeldLines`).

Log lines are the one thing an instance can make arbitrarily many of (a flood of 100k lines/s is 10 MB/s
or more): the history keeps each batch only as its last lines plus a count of those left out (the log
file has them all; a client that wants them reads `/logs`), and a feed batch keeps each instance's most
recent lines up to a budget, counting what it dropped. Sizes are estimates of the memory held: a line's
characters plus a fixed cost per line, an event's JSON size otherwise."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

EVENT_HISTORY = 2000  # events kept for GET /events
EVENT_HISTORY_BYTES = 4 << 20  # ... and at most this much of them
HISTORY_BATCH_BYTES = 16 << 10  # of one log batch, the history keeps its last lines up to this
HELD_LINES_BYTES = 4 << 20  # an instance's lines held for one feed batch (FEED_BATCH_S) at most
LINE_COST = 64  # what one kept line costs beyond its characters (a str object, a list slot)


def line_bytes(line: str) -> int:
    return len(line) + LINE_COST


def event_bytes(event: dict[str, Any]) -> int:
    """The estimated memory one encoded event holds."""
    lines = event.get("lines")
    if isinstance(lines, list):
        return 256 + sum(len(line) + LINE_COST for line in lines)
    return 128 + len(json.dumps(event, default=str))


def tail_within(lines: Iterable[str], budget: int) -> tuple[list[str], int]:
    """The last of `lines` whose cost fits `budget` (at least the very last one, cut to fit), and how many
    were left out before them."""
    seq = lines if isinstance(lines, (list, tuple)) else list(lines)
    kept: list[str] = []
    spent = 0
    for line in reversed(seq):
        cost = line_bytes(line)
        if spent + cost > budget:
            if not kept:
                kept.append(line[: max(0, budget - LINE_COST)])
            break
        kept.append(line)
        spent += cost
    kept.reverse()
    return kept, len(seq) - len(kept)


def summarized(event: dict[str, Any], budget: int = HISTORY_BATCH_BYTES) -> dict[str, Any]:
    """A log-lines event as the history keeps it: its last lines within `budget`, and `omitted`, how many
    came before them (a batch that fits is kept whole, without the key)."""
    lines = event.get("lines")
    if not isinstance(lines, list):
        return event
    kept, omitted = tail_within(lines, budget)
    if not omitted and len(kept) == len(lines) and (not kept or kept[-1] is lines[-1]):
        return event
    return {**event, "lines": kept, "omitted": omitted + event.get("omitted", 0)}


class EventHistory:
    """Encoded events, oldest first, bounded in count (`maxlen`) and in estimated bytes (`max_bytes`)."""

    __slots__ = ("_items", "_bytes", "max_bytes")

    def __init__(self, maxlen: int = EVENT_HISTORY, max_bytes: int = EVENT_HISTORY_BYTES) -> None:
        self._items: deque[tuple[int, dict[str, Any]]] = deque(maxlen=maxlen)
        self._bytes = 0
        self.max_bytes = max_bytes

    @property
    def maxlen(self) -> int | None:
        return self._items.maxlen

    @property
    def nbytes(self) -> int:
        return self._bytes

    def append(self, event: dict[str, Any]) -> None:
        event = summarized(event, min(HISTORY_BATCH_BYTES, self.max_bytes))
        size = event_bytes(event)
        items = self._items
        if len(items) == items.maxlen:
            self._bytes -= items[0][0]
        items.append((size, event))
        self._bytes += size
        while self._bytes > self.max_bytes and len(items) > 1:
            self._bytes -= items.popleft()[0]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (event for _, event in self._items)

    def last(self, n: int) -> list[dict[str, Any]]:
        if n <= 0:
            return []
        items = self._items
        return [event for _, event in list(items)[-n:]]


class HeldLines:
    """One instance's log lines waiting for the next feed batch: the most recent ones within `max_bytes`,
    and how many older ones were dropped to stay there (`omitted`)."""

    __slots__ = ("lines", "nbytes", "omitted", "max_bytes")

    def __init__(self, max_bytes: int = HELD_LINES_BYTES) -> None:
        self.lines: deque[str] = deque()
        self.nbytes = 0
        self.omitted = 0
        self.max_bytes = max_bytes

    def extend(self, lines: Iterable[str]) -> None:
        seq = lines if isinstance(lines, (list, tuple)) else list(lines)
        total = sum(line_bytes(line) for line in seq)
        if total > self.max_bytes:  # this batch alone is over: keep its tail, drop all held before
            kept, dropped = tail_within(seq, self.max_bytes)
            self.omitted += len(self.lines) + dropped
            self.lines = deque(kept)
            self.nbytes = sum(line_bytes(line) for line in kept)
            return
        held = self.lines
        held.extend(seq)
        self.nbytes += total
        while self.nbytes > self.max_bytes and held:
            self.nbytes -= line_bytes(held.popleft())
            self.omitted += 1
