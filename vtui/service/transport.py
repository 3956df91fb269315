"""The session service's HTTP/1.1 (h11) on its socket: requests with JSON bodies, answered by
`handle`, and `GET /feed`, the NDJSON stream (a hello with the full status, then one message a line;
a client that falls `feed.FEED_BUFFER` bytes behind is dropped)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import h11

from vtui.service.feed import FeedClient
from vtui.service.service_base import ServiceBase
from vtui.service.wire import feed_line


class TransportMixin(ServiceBase):
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients += 1
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await self._read_request(conn, reader)
                if request is None:
                    break
                target = request.target.decode()
                if request.method == b"GET" and target.split("?")[0] == "/feed":
                    await self._feed(conn, reader, writer)
                    break
                try:
                    payload = json.loads(body) if body else {}
                    if not isinstance(payload, dict):
                        raise ValueError("expected a JSON object")
                except ValueError as exc:
                    status, answer = 400, {"error": f"bad JSON body: {exc}"}
                else:
                    status, answer = await self.handle(request.method.decode(), target, payload)
                data = json.dumps(answer).encode()
                headers = [("content-type", "application/json"), ("content-length", str(len(data)))]
                writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
                writer.write(conn.send(h11.Data(data=data)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    break
                conn.start_next_cycle()
        except (h11.RemoteProtocolError, h11.LocalProtocolError, ConnectionError):
            pass
        finally:
            self._clients -= 1
            self._last_client = time.monotonic()
            with contextlib.suppress(Exception):
                writer.close()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        chunks: list[bytes] = []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
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
        self._feeds.add(feed)
        headers = [("content-type", "application/x-ndjson"), ("cache-control", "no-store")]
        writer.write(conn.send(h11.Response(status_code=200, headers=headers)) or b"")
        hello = {"type": "hello", **self.status()}
        writer.write(conn.send(h11.Data(data=feed_line(hello))) or b"")
        await writer.drain()
        gone = asyncio.ensure_future(reader.read(1))  # EOF (or anything): the client left
        ended = asyncio.ensure_future(feed.ended.wait())  # shut down, or too slow a reader
        try:
            await asyncio.wait({gone, ended}, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.sleep(0)  # the last turn's lines leave first (an ending feed's flush)
        finally:
            self._feeds.discard(feed)
            gone.cancel()
            ended.cancel()
