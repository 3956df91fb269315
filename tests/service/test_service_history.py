"""The supervisor's log buffers are bounded in bytes as well as in count (`service.history`,
`core.linering.LineRing`, the tailer's line cap): a flood of log lines cannot grow the process."""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

from vtui.core.events import LogLines, Notice
from vtui.core.linering import LineRing
from vtui.service.broadcast import FEED_BATCH_S, Broadcaster
from vtui.service.eventhub import EventHub
from vtui.service.history import (
    EVENT_HISTORY_BYTES,
    HELD_LINES_BYTES,
    EventHistory,
    HeldLines,
    event_bytes,
)
from vtui.service.wire import encode_event
from vtui.supervisor.logfile import MAX_LINE, LogTailer


def batch(i: int, n: int = 5000, width: int = 100) -> tuple[str, ...]:
    return tuple(f"{i:06d} {j:06d} " + "x" * width for j in range(n))  # fresh strings each batch


def test_the_event_history_holds_a_flood_within_its_byte_bound() -> None:
    history = EventHistory()
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(300):  # 1.5M lines, ~180 MB of text: what 15 s of a 100k lines/s flood makes
            history.append(encode_event(LogLines("a", batch(i))))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert history.nbytes <= EVENT_HISTORY_BYTES
    assert held < 2 * EVENT_HISTORY_BYTES, f"{held / 2**20:.1f} MiB held"
    newest = list(history)[-1]
    assert newest["lines"][-1] == batch(299)[-1]  # the most recent lines are the ones kept
    assert newest["omitted"] + len(newest["lines"]) == 5000


def test_the_byte_bound_drops_the_oldest_events_first() -> None:
    history = EventHistory(maxlen=100, max_bytes=64 << 10)
    for i in range(1000):
        history.append(encode_event(Notice("a", "info", f"notice {i} " + "y" * 500)))
    kept = [e["text"].split()[1] for e in history]
    assert history.nbytes <= 64 << 10
    assert kept[-1] == "999" and kept == [str(i) for i in range(1000 - len(kept), 1000)]
    assert sum(event_bytes(e) for e in history) == history.nbytes  # the running total stays exact
    assert [e["text"] for e in history.last(2)] == [e["text"] for e in list(history)[-2:]]


def test_the_count_bound_still_holds_for_small_events() -> None:
    history = EventHistory(maxlen=50)
    for i in range(500):
        history.append(encode_event(LogLines("a", (f"line {i}",))))
    assert len(history) == 50 and "omitted" not in list(history)[-1]  # a small batch is kept whole
    assert list(history)[-1]["lines"] == ["line 499"]


def test_held_lines_keep_the_most_recent_within_their_bound() -> None:
    held = HeldLines(max_bytes=10_000)
    for i in range(20):
        held.extend(batch(i, n=30, width=50))
    assert held.nbytes <= 10_000 and held.nbytes == sum(len(x) + 64 for x in held.lines)
    assert held.lines[-1] == batch(19, n=30, width=50)[-1]
    assert held.omitted + len(held.lines) == 600
    held.extend(batch(99, n=1000, width=50))  # one batch over the bound alone
    assert held.nbytes <= 10_000 and held.omitted + len(held.lines) == 1600


class Writes:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def put(self, data: bytes) -> None:
        self.writes.append(data)


class Feeds:
    def __init__(self) -> None:
        self.queue = Writes()
        self.feed = Broadcaster()
        self.feed.add(self.queue)  # type: ignore[arg-type]
        self.events = EventHistory()
        supervisor = SimpleNamespace(layout=SimpleNamespace(names=lambda: ()), instances={})
        self.hub = EventHub(supervisor, self.feed, None, None, spawn=None, history=self.events)  # type: ignore[arg-type]


async def test_a_feed_batch_of_a_flood_is_bounded_and_says_what_it_left_out() -> None:
    feeds = Feeds()
    for i in range(10):  # 50,000 lines in one batch window
        feeds.hub.on_event(LogLines("a", batch(i)))
    await asyncio.sleep(FEED_BATCH_S + 0.1)
    (write,) = feeds.queue.writes
    assert len(write) < HELD_LINES_BYTES + 4096
    (message,) = [json.loads(line) for line in write.splitlines()]
    event = message["event"]
    assert event["lines"][-1] == batch(9)[-1]
    assert event["omitted"] + len(event["lines"]) == 50_000


def test_the_line_ring_is_bounded_in_bytes() -> None:
    ring = LineRing(2000, max_bytes=200_000)
    ring.extend("z" * 1000 for _ in range(2000))
    assert ring.nbytes <= 200_000 and 0 < len(ring) < 200
    ring.extend(["short"] * 3000)
    assert len(ring) == 2000 and list(ring)[-1] == "short" and ring.maxlen == 2000
    ring.clear()
    assert len(ring) == 0 and ring.nbytes == 0


def test_the_tailer_cuts_long_lines_and_a_line_without_end(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"")
    tailer = LogTailer(log)
    with log.open("ab") as f:
        f.write(b"a" * (3 * MAX_LINE) + b"\nshort\n" + b"b" * (5 * MAX_LINE))  # the last has no newline
    lines = tailer.read()
    tailer.close()
    assert all(len(line) < MAX_LINE + 100 for line in lines)
    assert lines[0].startswith("a" * MAX_LINE) and "more characters" in lines[0]
    assert lines[1] == "short" and lines[2].startswith("b")
