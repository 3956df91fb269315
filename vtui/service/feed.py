"""One client of the session service's feed (`GET /feed`): the broadcast's lines queued for it leave in
one write at the end of the event loop's turn (a callback, no task or queue wake-up per message); a
client whose unread bytes pass `FEED_BUFFER` is ended rather than buffered without bound."""

from __future__ import annotations

import asyncio

import h11

FEED_BUFFER = 4 << 20  # bytes per client its reader has not taken yet; past this it is dropped


class FeedClient:
    __slots__ = ("_conn", "_writer", "_pending", "_loop", "ended")

    def __init__(self, conn: h11.Connection, writer: asyncio.StreamWriter) -> None:
        self._conn, self._writer = conn, writer
        self._pending: list[bytes] = []
        self._loop = asyncio.get_running_loop()
        self.ended = asyncio.Event()

    def put(self, line: bytes) -> None:
        """Queue one line (JSON and its newline); nothing once the feed ended."""
        if self.ended.is_set():
            return
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(line)

    def end(self) -> None:
        """End the feed (what is queued still leaves, in this turn's write)."""
        self.ended.set()

    def _flush(self) -> None:
        lines, self._pending = self._pending, []
        transport = self._writer.transport
        if not lines or transport.is_closing():
            return
        self._writer.write(self._conn.send(h11.Data(data=b"".join(lines))) or b"")
        if transport.get_write_buffer_size() > FEED_BUFFER:  # too slow a reader
            self.end()
