"""The feed's telemetry batching (`service.broadcast`): samples, GPU samples and log lines wait up to
FEED_BATCH_S and go out as one write (each instance's lines as one event); anything else goes at once,
after what was held (the lines that led to a state change reach a client first); the events kept for
`GET /events` are not batched."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from vtui.core.events import LogLines
from vtui.service.broadcast import FEED_BATCH_S, Broadcaster
from vtui.service.eventhub import EventHub
from vtui.service.history import EventHistory
from vtui.service.wire import decode_event


class Writes:
    """A feed client (`service.feed.FeedClient`'s `put`): each write it was handed, in order."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def put(self, data: bytes) -> None:
        self.writes.append(data)


class Feeds:
    """The feed's sending side (`Broadcaster`) behind the service's event hub, with one client."""

    def __init__(self) -> None:
        self.queue = Writes()
        self.feed = Broadcaster()
        self.feed.add(self.queue)  # type: ignore[arg-type]
        self.events = EventHistory(maxlen=100)
        supervisor = SimpleNamespace(layout=SimpleNamespace(names=lambda: ()), instances={})
        self.hub = EventHub(supervisor, self.feed, None, None, spawn=None, history=self.events)  # type: ignore[arg-type]


def drained(feed: Writes) -> list[bytes]:
    out, feed.writes = feed.writes, []
    return out


def messages(writes: list[bytes]) -> list[dict]:
    return [json.loads(line) for write in writes for line in write.splitlines() if line]


async def test_telemetry_goes_out_together_at_most_every_batch_window() -> None:
    feeds = Feeds()
    feeds.hub.on_event(LogLines("a", ("a1",)))
    feeds.feed.broadcast({"type": "sample", "sample": {"instance": "a", "at": 1.0}})
    feeds.hub.on_event(LogLines("b", ("b1",)))
    feeds.hub.on_event(LogLines("a", ("a2", "a3")))
    feeds.feed.broadcast({"type": "gpu", "sample": {"available": False, "at": 1.0}})
    assert drained(feeds.queue) == []  # held
    assert len(feeds.events) == 3  # kept for GET /events one by one
    await asyncio.sleep(FEED_BATCH_S + 0.1)
    writes = drained(feeds.queue)
    assert len(writes) == 1, writes  # one write: a client wakes once for all of it
    got = messages(writes)
    lines = [decode_event(m["event"]) for m in got if m["type"] == "event"]
    assert lines == [LogLines("a", ("a1", "a2", "a3")), LogLines("b", ("b1",))]
    assert [m["type"] for m in got if m["type"] != "event"] == ["sample", "gpu"]
    await asyncio.sleep(FEED_BATCH_S + 0.1)
    assert drained(feeds.queue) == []  # nothing new, nothing sent


async def test_a_status_goes_at_once_after_what_was_held() -> None:
    feeds = Feeds()
    feeds.hub.on_event(LogLines("a", ("the line before the crash",)))
    feeds.feed.broadcast({"type": "status", "instances": []})
    got = messages(drained(feeds.queue))
    assert [m["type"] for m in got] == ["event", "status"], got
    await asyncio.sleep(FEED_BATCH_S + 0.1)
    assert drained(feeds.queue) == []  # flushed early: the window's timer sends nothing twice
    feeds.hub.on_event(LogLines("a", ("later",)))
    await asyncio.sleep(FEED_BATCH_S + 0.1)
    assert [decode_event(m["event"]).lines for m in messages(drained(feeds.queue))] == [("later",)]


async def test_nothing_is_held_without_a_client() -> None:
    feeds = Feeds()
    feeds.feed.discard(feeds.queue)  # type: ignore[arg-type]
    feeds.hub.on_event(LogLines("a", ("x",)))
    feeds.feed.broadcast({"type": "sample", "sample": {}})
    assert not feeds.feed.holding and len(feeds.events) == 1
