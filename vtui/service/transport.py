"""The session service's HTTP/1.1 (h11) on its socket: requests with JSON bodies, answered by
`handle`, and `GET /feed`, the NDJSON stream (a hello with the full status, then one message a line; a
client that falls `feed.FEED_BUFFER` bytes behind is dropped). Every answer names the API and vtui
versions (`api`); a request's `vtui-api` header goes to `handle`. What is not a request is answered and
the connection closed: malformed HTTP 400, a head past MAX_HEAD 431, a body past `schema.MAX_BODY` 413
(from its Content-Length, before reading it), a body not JSON or nested too deeply 400."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import h11

from vtui.service.api import API_HEADER, API_VERSION, VERSION_HEADER, VTUI_VERSION
from vtui.service.broadcast import Broadcaster
from vtui.service.feed import FeedClient
from vtui.service.schema import MAX_BODY, BadRequest, parse_body
from vtui.service.wire import feed_line

MAX_HEAD = 32 << 10  # bytes of a request's line and headers (431 past twice this at most)
FEED = ("GET", "/feed")  # the route of `schema.ROUTES` answered here, as a stream
VERSION_HEADERS = [(API_HEADER, str(API_VERSION)), (VERSION_HEADER, VTUI_VERSION)]  # on every answer


Handler = Callable[[str, str, dict[str, Any], "int | None"], Awaitable[tuple[int, dict[str, Any]]]]


class SocketServer:
    """The session's socket (0600): each connection's requests answered by `handle`, the feed's clients
    added to `feed` with `hello()` as their first line. `clients`: connections open now; `on_close` hears
    each one end, `on_feed` each feed client come."""

    def __init__(
        self,
        path: Path,
        handle: Handler,
        hello: Callable[[], dict[str, Any]],
        feed: Broadcaster,
        on_close: Callable[[], None] = lambda: None,
        on_feed: Callable[[], None] = lambda: None,
    ) -> None:
        self.path = path
        self.handle = handle
        self.hello = hello
        self.feed = feed
        self.on_close = on_close
        self.on_feed = on_feed
        self.clients = 0
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Bind the socket, readable and writable by this user alone from the start."""
        self.path.unlink(missing_ok=True)
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._connection, path=str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients += 1
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            while True:
                try:
                    request, body = await self._read_request(conn, reader)
                    if request is None:
                        break
                    if request.http_version != b"1.1":  # h11 takes any HTTP/d.d; vtui's clients speak 1.1
                        raise BadRequest(f"HTTP/{_ascii(request.http_version, 'version')}: expected HTTP/1.1")
                    target = _ascii(request.target, "request target")
                    if (request.method.decode("latin-1"), target.split("?")[0]) == FEED:
                        if body:
                            raise BadRequest("GET /feed takes no body")
                        await self._feed(conn, reader, writer)
                        break
                    payload = parse_body(body)
                except BadRequest as exc:  # too big, not JSON, nested too deep, not ASCII
                    await self._answer(conn, writer, exc.status, {"error": str(exc)}, close=True)
                    break
                except h11.RemoteProtocolError as exc:  # not HTTP/1.1: a 400 (431: head too big)
                    if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                        hint = exc.error_status_hint  # 505 for an HTTP/2 preface: input, so a 400
                        status = hint if 400 <= hint < 500 else 400
                        answer = {"error": f"bad HTTP request: {str(exc)[:200]}"}
                        await self._answer(conn, writer, status, answer, close=True)
                    break
                api = _api_of(request.headers)
                status, answer = await self.handle(_ascii(request.method, "method"), target, payload, api)
                await self._answer(conn, writer, status, answer)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    break
                conn.start_next_cycle()
        except (h11.RemoteProtocolError, h11.LocalProtocolError, ConnectionError):
            pass
        finally:
            self.clients -= 1
            self.on_close()
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _answer(
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        status: int,
        answer: dict[str, Any],
        close: bool = False,
    ) -> None:
        data = json.dumps(answer).encode()
        headers = [*VERSION_HEADERS, ("content-type", "application/json"), ("content-length", str(len(data)))]
        if close:
            headers.append(("connection", "close"))
        writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
        writer.write(conn.send(h11.Data(data=data)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> tuple[h11.Request | None, bytes]:
        """The next request and its body; BadRequest (413) for a body past MAX_BODY, said by its
        Content-Length before any of it is read, or found while a chunked one comes."""
        request: h11.Request | None = None
        chunks: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(MAX_HEAD if request is None else 1 << 16))
            elif isinstance(event, h11.Request):
                request = event
                length = dict(event.headers).get(b"content-length")
                if length is not None and int(length) > MAX_BODY:  # h11 checked it is digits
                    raise BadRequest(f"request body of {int(length)} bytes: at most {MAX_BODY}", 413)
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_BODY:
                    raise BadRequest(f"request body over {MAX_BODY} bytes", 413)
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return request, b"".join(chunks)
            else:  # ConnectionClosed, PAUSED
                return None, b""

    async def _feed(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """The streamed feed: a hello line with the full status, then one JSON object per line."""
        feed = FeedClient(conn, writer)
        self.feed.add(feed)
        self.on_feed()  # the supervisor's tick and the GPU sampler, resting while nobody followed, wake
        headers = [*VERSION_HEADERS, ("content-type", "application/x-ndjson"), ("cache-control", "no-store")]
        writer.write(conn.send(h11.Response(status_code=200, headers=headers)) or b"")
        hello = {"type": "hello", **self.hello()}
        writer.write(conn.send(h11.Data(data=feed_line(hello))) or b"")
        await writer.drain()
        gone = asyncio.ensure_future(reader.read(1))  # EOF (or anything): the client left
        ended = asyncio.ensure_future(feed.ended.wait())  # shut down, or too slow a reader
        try:
            await asyncio.wait({gone, ended}, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.sleep(0)  # the last turn's lines leave first (an ending feed's flush)
        finally:
            self.feed.discard(feed)
            gone.cancel()
            ended.cancel()


def _api_of(headers: Sequence[tuple[bytes, bytes]]) -> int | None:
    """The API version a request names (`vtui-api`), None when it names none (-1: not a number)."""
    for name, value in headers:
        if name == API_HEADER.encode():
            return int(value) if value.isdigit() else -1
    return None


def _ascii(data: bytes, what: str) -> str:
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest(f"{what}: not ASCII") from None
