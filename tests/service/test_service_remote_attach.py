"""How the dashboard's client attaches to a running session supervisor (a stand-in speaking its socket
API: hello on the feed, /layout, /logs, /history): the first snapshot reaches the subscribers without
waiting on the backfills or the layout hand-over, the lines a first view derives something from come
before it, and a refused layout is still the caller's error."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import h11
import pytest

from vtui.core.events import Event, LogLines
from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.service.api import API_VERSION, VTUI_VERSION
from vtui.service.remote import RemoteError, RemoteSupervisor
from vtui.service.wire import encode_status

pytestmark = pytest.mark.timeout(30)


def _status(spec: InstanceSpec, state: State, log: Path, facts: dict | None = None) -> dict[str, Any]:
    st = InstanceStatus(spec.name, spec, state, None, 123, 1.0, 0, None, log, True, None, None)
    return encode_status(st, in_layout=True, facts=facts)


class StandIn:
    """The supervisor's socket API, enough for an attach: answers held back until a test releases them."""

    def __init__(self, hello: dict[str, Any] | None, layout_answer: tuple[int, dict[str, Any]]) -> None:
        self.hello = hello
        self.layout_answer = layout_answer
        self.requests: list[str] = []
        self.release_logs = asyncio.Event()
        self.release_layout = asyncio.Event()
        self.history: dict[str, Any] = {"samples": []}  # GET /history's answer

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                if not data:
                    return
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.EndOfMessage):
                break
        assert request is not None
        target = request.target.decode()
        self.requests.append(f"{request.method.decode()} {target}")
        if target.startswith("/feed"):
            if self.hello is None:  # a hung supervisor: takes the connection, says nothing
                await reader.read()
                return
            headers = [("content-type", "application/x-ndjson")]
            writer.write(conn.send(h11.Response(status_code=200, headers=headers)) or b"")
            writer.write(conn.send(h11.Data(data=(json.dumps(self.hello) + "\n").encode())) or b"")
            await writer.drain()
            await reader.read()  # open until the client leaves
            return
        status, answer = 200, {}
        if target.startswith("/logs"):
            name = target.split("name=")[1].split("&")[0]
            if name == "ready":
                await self.release_logs.wait()
            answer = {"lines": [f"{name} line"]}
        elif target.startswith("/history"):
            answer = self.history
        elif target.startswith("/layout"):
            await self.release_layout.wait()
            status, answer = self.layout_answer
        data = json.dumps(answer).encode()
        headers = [("content-type", "application/json"), ("content-length", str(len(data)))]
        writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
        writer.write(conn.send(h11.Data(data=data)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()
        writer.close()


async def _attached(tmp_path: Path, layout_answer: tuple[int, dict[str, Any]] = (200, {"ok": True})):
    ready = InstanceSpec("ready", "m", 8001, engine="sim")
    failed = InstanceSpec("failed", "m", 8002, engine="sim")
    layout = Layout(SessionSpec("attach"), (ready, failed), path=tmp_path / "l.toml")
    hello = {
        "type": "hello",
        "api_version": API_VERSION,
        "vtui_version": VTUI_VERSION,
        "supervisor_pid": 1,
        "gpu_sampling": True,
        "instances": [
            _status(ready, State.READY, tmp_path / "ready.log", facts={"kv_cache_tokens": 1000}),
            _status(failed, State.FAILED, tmp_path / "failed.log"),
        ],
    }
    stand_in = StandIn(hello, layout_answer)
    sock = tmp_path / "s.sock"
    server = await asyncio.start_unix_server(stand_in.serve, path=str(sock))
    remote = RemoteSupervisor(layout, socket_file=sock)
    seen: list[str] = []

    def on_event(event: Event) -> None:
        if isinstance(event, LogLines):
            seen.append(f"lines {event.instance}")

    remote.subscribe(on_event)
    remote.subscribe_statuses(lambda: seen.append("snapshot " + ",".join(st.name for st in remote.status())))
    return server, stand_in, remote, seen


async def _until(predicate, what: str) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_the_first_snapshot_waits_for_no_backfill_and_no_layout_hand_over(tmp_path: Path) -> None:
    server, stand_in, remote, seen = await _attached(tmp_path)
    try:
        adopt = asyncio.ensure_future(remote.adopt())
        await _until(lambda: any(s.startswith("snapshot") for s in seen), "the first snapshot")
        # the failed run's lines (its diagnosis) before the snapshot; the READY one's tail is still held
        assert seen[:2] == ["lines failed", "snapshot ready,failed"], seen
        assert not stand_in.release_logs.is_set() and not adopt.done()
        # no liveness request before the feed: its hello is the first frame's data
        assert stand_in.requests[0] == "GET /feed", stand_in.requests
        assert "POST /layout" in stand_in.requests  # handed over alongside the feed
        stand_in.release_logs.set()
        await _until(lambda: "lines ready" in seen, "the READY instance's log tail")
        assert not adopt.done()  # adopt() waits for the layout hand-over
        stand_in.release_layout.set()
        assert await asyncio.wait_for(adopt, 5) == ["ready"]
        assert any(r.startswith("GET /history") for r in stand_in.requests)
    finally:
        stand_in.release_logs.set()
        stand_in.release_layout.set()
        await remote.close()
        server.close()


async def test_a_refused_layout_is_the_callers_error_though_the_feed_is_open(tmp_path: Path) -> None:
    refusal = (409, {"error": "l.toml is session other", "problems": ["l.toml is session other"]})
    server, stand_in, remote, seen = await _attached(tmp_path, refusal)
    stand_in.release_logs.set()
    stand_in.release_layout.set()
    try:
        with pytest.raises(RemoteError, match="session other"):
            await asyncio.wait_for(remote.adopt(), 5)
        assert any(s.startswith("snapshot") for s in seen)
    finally:
        await remote.close()
        server.close()


async def test_a_supervisor_that_sends_no_snapshot_is_the_callers_error(tmp_path: Path) -> None:
    server, stand_in, remote, seen = await _attached(tmp_path)
    stand_in.hello = None
    stand_in.release_layout.set()
    remote.hello_timeout = 0.5
    try:
        with pytest.raises(RemoteError, match="no snapshot"):
            await asyncio.wait_for(remote.adopt(), 5)
        assert not seen
    finally:
        await remote.close()
        server.close()


@pytest.mark.parametrize("supervisor", ["points", "whole samples (an older supervisor)"])
async def test_the_history_backfill_reaches_the_subscribers_as_points_and_the_newest_sample(
    tmp_path: Path, supervisor: str
) -> None:
    """The dashboard asks for points (a plot's figures) and the newest sample whole; an older supervisor
    that ignores `fields=points` sends whole samples, read the same way."""
    from vtui.service.wire import decode_sample, encode_sample, point_of
    from vtui.telemetry.metrics import HistoryBackfill, HistoryPoint, sample_of

    busy = (Path(__file__).parents[1] / "telemetry" / "fixtures" / "metrics_busy.txt").read_text()
    whole = [encode_sample(sample_of(busy, "ready", float(t))) for t in range(5)]
    server, stand_in, remote, _ = await _attached(tmp_path)
    if supervisor == "points":
        stand_in.history = {"samples": [point_of(s) for s in whole[:-1]], "latest": whole[-1]}
    else:
        stand_in.history = {"samples": whole}
    got: list[tuple[str, Any]] = []
    remote.subscribe_telemetry(lambda kind, payload: got.append((kind, payload)))
    stand_in.release_logs.set()
    stand_in.release_layout.set()
    try:
        await asyncio.wait_for(remote.adopt(), 5)
        await _until(lambda: any(kind == "history" for kind, _ in got), "the history backfill")
        [backfill] = [payload for kind, payload in got if kind == "history"]
        assert isinstance(backfill, HistoryBackfill) and backfill.instance == "ready"
        expected = [HistoryPoint.of(decode_sample(s)) for s in whole[:-1]]
        assert list(backfill.points) == expected and expected[0].ttft_p95 is not None
        assert backfill.latest == decode_sample(whole[-1]) and backfill.latest.windowed
        assert any("fields=points" in r for r in stand_in.requests if r.startswith("GET /history"))
    finally:
        await remote.close()
        server.close()
