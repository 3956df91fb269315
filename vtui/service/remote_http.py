"""HTTP on a session supervisor's socket for the dashboard's client (`remote.RemoteSupervisor`), with h11
straight off the Unix socket: one request on its own connection, and the feed's NDJSON lines. No httpx:
it would cost the first frame its import, and on the feed, which carries every sample and log line of
every instance, its streaming layers cost the dashboard more than the parsing does
(`benchmarks/bench_hosts.py`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import h11

from vtui.service.wire import loads

__all__ = ["Connection", "RemoteError", "feed_lines", "request"]

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class RemoteError(RuntimeError):
    """The session supervisor refused a request (its message) or could not be reached."""


async def request(
    socket_file: Path, method: str, target: str, body: dict[str, Any] | None = None, *, who: str
) -> tuple[int, dict[str, Any]]:
    """One request on its own connection: (HTTP status, the JSON object answered). Raises RemoteError
    (its message starts with `who`) when the supervisor cannot be reached or answers no JSON object."""
    try:
        reader, writer = await asyncio.open_unix_connection(str(socket_file))
    except OSError as exc:
        raise RemoteError(f"{who}: {exc}") from exc
    conn = h11.Connection(h11.CLIENT)
    status, chunks = 0, []
    try:
        payload = json.dumps(body).encode() if body is not None else b""
        headers = [("host", "vtui"), ("connection", "close")]
        if body is not None:
            headers += [("content-type", "application/json"), ("content-length", str(len(payload)))]
        writer.write(conn.send(h11.Request(method=method, target=target, headers=headers)) or b"")
        if payload:
            writer.write(conn.send(h11.Data(data=payload)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(1 << 16))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
    except (OSError, h11.ProtocolError) as exc:
        raise RemoteError(f"{who}: {exc!r}") from exc
    finally:
        writer.close()
    try:
        answer = loads(b"".join(chunks) or b"{}")  # orjson: a backfill's answers are ~100 KB each
    except ValueError as exc:
        raise RemoteError(f"{who}: HTTP {status}, not JSON") from exc
    return status, answer if isinstance(answer, dict) else {}


async def feed_lines(connection: Connection) -> AsyncIterator[bytes]:
    """`GET /feed` on an open connection: its NDJSON lines, until the supervisor ends the stream or goes
    away (the connection is closed on the way out)."""
    reader, writer = connection
    conn = h11.Connection(h11.CLIENT)
    try:
        headers = [("host", "vtui"), ("accept", "application/x-ndjson")]
        writer.write(conn.send(h11.Request(method="GET", target="/feed", headers=headers)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()
        pending = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(1 << 16))  # b"": the supervisor went away
            elif isinstance(event, h11.Response):
                if event.status_code != 200:
                    raise RemoteError(f"the feed answered HTTP {event.status_code}")
            elif isinstance(event, h11.Data):
                pending += event.data
                if b"\n" in pending:
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield line
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return
    finally:
        writer.close()
