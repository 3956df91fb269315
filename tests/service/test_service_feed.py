"""A feed client (`service.feed.FeedClient`): the lines put in one turn of the loop arrive whole and in
order, what was queued before `end()` still arrives, and a reader that stops reading is dropped once its
unread bytes pass FEED_BUFFER instead of being buffered without bound."""

from __future__ import annotations

import asyncio

import h11

from vtui.service import feed as feed_module
from vtui.service.feed import FeedClient


async def _pair() -> tuple[FeedClient, asyncio.StreamReader, asyncio.AbstractServer, asyncio.StreamWriter]:
    made: asyncio.Future[FeedClient] = asyncio.get_running_loop().create_future()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(await reader.readuntil(b"\r\n\r\n"))
        conn.next_event()
        writer.write(conn.send(h11.Response(status_code=200, headers=[])) or b"")
        made.set_result(FeedClient(conn, writer))
        await asyncio.sleep(30)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /feed HTTP/1.1\r\nhost: x\r\n\r\n")
    await reader.readuntil(b"\r\n\r\n")
    return await made, reader, server, writer  # the writer kept: dropped, it would close the socket


async def _lines(reader: asyncio.StreamReader, n: int) -> list[bytes]:
    out: list[bytes] = []
    while len(out) < n:
        size = int((await reader.readline()).strip(), 16)  # a chunk: the lines of one write
        out += (await reader.readexactly(size + 2))[:-2].splitlines(keepends=True)
    return out


def test_lines_arrive_in_order_and_a_reader_that_stops_is_dropped(monkeypatch) -> None:
    async def main() -> None:
        feed, reader, server, _w1 = await _pair()
        sent = [b'{"n":%d}\n' % i for i in range(50)]
        for line in sent[:30]:
            feed.put(line)
        await asyncio.sleep(0)
        for line in sent[30:]:
            feed.put(line)
        feed.end()  # what was queued still leaves
        feed.put(b'{"late":1}\n')  # not after the end
        assert await asyncio.wait_for(_lines(reader, 50), 5) == sent
        assert feed.ended.is_set()

        monkeypatch.setattr(feed_module, "FEED_BUFFER", 1 << 20)
        slow, _, other, _w2 = await _pair()  # its reader never reads
        big = b"x" * 60_000 + b"\n"
        for _ in range(200):  # 12 MB offered; the socket takes some, the rest piles up
            slow.put(big)
            await asyncio.sleep(0)
            if slow.ended.is_set():
                break
        assert slow.ended.is_set()
        slow.put(big)  # ignored once ended
        assert slow._writer.transport.get_write_buffer_size() <= (1 << 20) + len(big) + 64
        for s in (server, other):
            s.close()
        for w in (_w1, _w2):
            w.close()

    asyncio.run(main())
