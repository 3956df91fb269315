"""The lean HTTP client against scripted local servers: chunked decoding at every split, keep-alive
reuse, servers that close (idle, `Connection: close`, mid-body), timeouts, non-200 bodies, and the
bench's error accounting through it; plus the SSE fast path agreeing with the per-line path."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from vtui.bench import BenchConfig, run_bench
from vtui.bench.client import _Stream, make_client, send
from vtui.bench.lean_http import (
    ChunkedDecoder,
    ConnectError,
    ConnectTimeout,
    LeanPool,
    ReadTimeout,
    RemoteProtocolError,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Scripted:
    """A server whose every connection runs `handler`; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.server: asyncio.AbstractServer | None = None
        self.tasks: set[asyncio.Task] = set()

    async def _run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._run, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        pending = [t for t in self.tasks if not t.done()]
        if pending:  # handlers see the client's close within a loop turn or two; never leave them behind
            _, late = await asyncio.wait(pending, timeout=1.0)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


async def read_request(reader: asyncio.StreamReader) -> tuple[str, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    length = next((int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length")), 0)
    return lines[0], await reader.readexactly(length)


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def sse(n: int, usage: bool = True) -> list[bytes]:
    events = [b'data: {"choices":[{"index":0,"text":"w%d"}]}\n\n' % i for i in range(n)]
    if usage:
        events.append(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n' % n)
    return [*events, b"data: [DONE]\n\n"]


async def stream_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Keep-alive: answers every request with 4 tokens, one chunk each, 2 ms apart."""
    while True:
        await read_request(reader)
        writer.write(SSE_HEAD)
        for event in sse(4):
            writer.write(b"%x\r\n%b\r\n" % (len(event), event))
            await asyncio.sleep(0.002)
        writer.write(b"0\r\n\r\n")


def test_chunked_decoder_at_every_split_with_extensions_and_trailers():
    payload = [b"hello ", b"chunked", b" world" * 50]
    wire = (
        b"6;ext=1\r\nhello \r\n"
        + b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in payload[1:])
        + b"0\r\nX-Trailer: yes\r\n\r\n"
    )
    for split in range(1, len(wire)):
        decoder = ChunkedDecoder()
        out = decoder.feed(wire[:split]) + decoder.feed(wire[split:])
        assert out == b"".join(payload) and decoder.done and decoder.extra == b"", split
    decoder = ChunkedDecoder()
    assert b"".join(decoder.feed(wire[i : i + 1]) for i in range(len(wire))) == b"".join(payload)
    decoder = ChunkedDecoder()
    decoder.feed(chunked(b"ab") + b"EXTRA")
    assert decoder.done and decoder.extra == b"EXTRA"
    with pytest.raises(RemoteProtocolError, match="bad chunk size"):
        ChunkedDecoder().feed(b"zz\r\nab\r\n")
    with pytest.raises(RemoteProtocolError, match="missing CRLF"):
        ChunkedDecoder().feed(b"2\r\nabXY")


async def test_keep_alive_reuses_one_connection_and_streams_pieces():
    async with Scripted(stream_server) as server:
        pool = LeanPool(timeout_s=5)
        for _ in range(5):
            pieces: list[bytes] = []
            response = await pool.request("POST", f"{server.url}/v1/completions", b"{}", pieces.append)
            assert response.status == 200 and response.body == b""
            assert b"".join(pieces) == b"".join(sse(4))
            assert len(pieces) >= 2  # delivered as it arrived, not once at the end
        await pool.aclose()
    assert server.connections == 1 and pool.connections_opened == 1


async def test_content_length_and_until_eof_bodies():
    async def handler(reader, writer):
        while True:
            line, _ = await read_request(reader)
            if "length" in line:
                writer.write(
                    b'HTTP/1.1 500 Internal Server Error\r\nContent-Length: 18\r\n\r\n{"message":"boom"}'
                )
            elif "empty" in line:
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            else:
                writer.write(b"HTTP/1.0 200 OK\r\n\r\nuntil the end")
                await writer.drain()
                return  # the close ends the body

    async with Scripted(handler) as server:
        pool = LeanPool(timeout_s=5)
        first = await pool.request("GET", f"{server.url}/length")
        assert (first.status, first.body) == (500, b'{"message":"boom"}')
        assert (await pool.request("GET", f"{server.url}/empty")).status == 204
        eof = await pool.request("GET", f"{server.url}/eof")
        assert (eof.status, eof.body) == (200, b"until the end")
        assert server.connections == 1  # kept alive through Content-Length and 204 bodies
        assert (await pool.request("GET", f"{server.url}/empty")).status == 204
        await pool.aclose()
    assert server.connections == 2  # a body read to EOF used its connection up


async def test_server_closing_idle_or_with_connection_close_gets_a_fresh_connection():
    async def handler(reader, writer):
        await read_request(reader)
        body = chunked(*sse(2))
        if server.connections == 1:
            writer.write(SSE_HEAD.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n") + body)
        else:
            writer.write(SSE_HEAD + body)  # keep-alive offered, then the server drops it anyway
        await writer.drain()

    async with Scripted(handler) as server:
        pool = LeanPool(timeout_s=5)
        for _ in range(3):
            sink: list[bytes] = []
            assert (await pool.request("POST", server.url + "/x", b"{}", sink.append)).status == 200
            assert b"[DONE]" in b"".join(sink)
            await asyncio.sleep(0.01)  # let the close arrive, or not: a stale reuse is retried once
        await pool.aclose()
    assert server.connections == 3


async def test_close_mid_body_and_refused_connection_raise():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(SSE_HEAD + b'40\r\ndata: {"choices":[{"text":"x"}]}\n\n')
        await writer.drain()

    async with Scripted(handler) as server:
        pool = LeanPool(timeout_s=5)
        with pytest.raises(RemoteProtocolError, match="mid-response"):
            await pool.request("POST", server.url + "/x", b"{}", lambda _: None)
        url = server.url
    with pytest.raises(ConnectError):
        await pool.request("POST", url + "/x", b"{}", lambda _: None)
    await pool.aclose()


async def test_read_timeout_when_the_server_stalls():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(SSE_HEAD + chunked(*sse(1))[:20])  # head and part of a chunk, then silence
        await writer.drain()
        await reader.read()

    async with Scripted(handler) as server:
        pool = LeanPool(timeout_s=0.15)
        started = asyncio.get_running_loop().time()
        with pytest.raises(ReadTimeout):
            await pool.request("POST", server.url + "/x", b"{}", lambda _: None)
        assert asyncio.get_running_loop().time() - started < 2
        await pool.aclose()


async def test_a_deadline_bounds_a_response_that_trickles():
    # a byte every 50 ms never trips the 1 s inactivity timeout; the 0.3 s deadline ends it
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
        for _ in range(100):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.05)

    async with Scripted(handler) as server:
        pool = LeanPool(timeout_s=1.0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ReadTimeout, match="no complete response in time"):
            await pool.request("GET", server.url + "/metrics", deadline_s=0.3)
        assert 0.25 < loop.time() - started < 1.0
        started = loop.time()
        with pytest.raises(ConnectTimeout):  # nothing left for the connect: refused at once, not hung
            await pool.request("GET", server.url + "/metrics", deadline_s=0.0)
        assert loop.time() - started < 0.5
        await pool.aclose()


async def test_bench_counts_errors_through_the_lean_client():
    # Request n: 0 → ok; 1 → HTTP 503 JSON error; 2 → stream error event; 3 → dropped mid-stream.
    count = 0

    async def handler(reader, writer):
        nonlocal count
        while True:
            await read_request(reader)
            kind, count = count % 4, count + 1
            if kind == 1:
                body = b'{"error":{"message":"server busy"}}'
                writer.write(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
                )
            elif kind == 2:
                writer.write(SSE_HEAD + chunked(b'data: {"error":{"message":"engine died"}}\n\n'))
            elif kind == 3:
                writer.write(SSE_HEAD + b"5\r\ndata:")
                await writer.drain()
                return
            else:
                writer.write(SSE_HEAD + chunked(*sse(3)))
            await writer.drain()

    async with Scripted(handler) as server:
        result = await run_bench(
            BenchConfig(
                server.url, model="m", concurrency=1, num_requests=8, output_len=3, scrape_metrics=False
            )
        )
    (step,) = result.steps
    assert (step.requests, step.completed, step.failed) == (8, 2, 6)
    errors = dict(step.errors)
    assert errors["HTTP 503: server busy"] == 2 and errors["stream error: engine died"] == 2
    assert sum(v for k, v in errors.items() if k.startswith("RemoteProtocolError")) == 2
    assert step.output_tok_per_s > 0


async def test_send_uses_lean_for_http_and_httpx_otherwise(monkeypatch):
    async with Scripted(stream_server) as server:
        client = make_client(4, 5.0, https=False)
        assert client.lean is not None
        record = await send(client, server.url + "/v1/completions", {"prompt": "x", "stream": True})
        assert record.ok and record.output_tokens == 4 and record.ttft is not None and len(record.itls) == 3
        assert client.lean.connections_opened == 1
        await client.aclose()
        assert make_client(4, 5.0, https=True).lean is None  # type: ignore[attr-defined]
        monkeypatch.setenv("VTUI_BENCH_HTTP", "httpx")
        forced = make_client(4, 5.0, https=False)
        assert forced.lean is None  # type: ignore[attr-defined]
        record = await send(forced, server.url + "/v1/completions", {"prompt": "x", "stream": True})
        assert record.ok and record.output_tokens == 4
        await forced.aclose()
    pool = LeanPool()
    assert pool.handles("http://127.0.0.1:8000/v1/completions")
    assert not pool.handles("https://example.com/v1/completions")
    assert not pool.handles("http://user:pw@127.0.0.1:8000/v1/completions")
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert not LeanPool().handles("http://10.1.2.3:8000/v1/completions")  # httpx would use the proxy


class _PerLine(_Stream):
    """The reference: the SSE framing of `_Stream.feed`, then one `_event` call per data line."""

    def feed(self, raw: bytes, now: float) -> None:
        buf = self._buf + raw
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._buf = buf
            return
        self._buf = buf[end + 2 :]
        for line in buf[:end].split(b"\n"):
            if line.startswith(b"data:"):
                self._event(line[5:].strip(), now)


def test_sse_fast_path_matches_the_per_line_path():
    wire = b"".join(sse(6))
    for first in range(1, len(wire)):
        for second in (first + 1, first + 40, len(wire)):
            fast, slow = _Stream(False, 0.0), _PerLine(False, 0.0)
            for i, piece in enumerate((wire[:first], wire[first:second], wire[second:])):
                fast.feed(piece, 1.0 + i)
                slow.feed(piece, 1.0 + i)
            assert (fast.first, fast.chunks, fast.gaps, fast.usage) == (
                slow.first,
                slow.chunks,
                slow.gaps,
                slow.usage,
            )
            assert fast.chunks == 6 and fast.usage == {"prompt_tokens": 3, "completion_tokens": 6}
    text = json.dumps({"choices": [{"text": "data: [DONE]\n\ndata:"}]}).encode()
    stream = _Stream(False, 0.0)
    stream.feed(b"data: " + text + b"\n\ndata: [DONE]\n\n", 1.0)
    assert stream.chunks == 1  # look-alikes inside a JSON string are not events
