"""The supervisor's lean probes (`service.probes`): a /health probe and a /metrics scrape are bounded as a
whole (a server that trickles bytes is given up on at the timeout, not kept alive by each byte)."""

from __future__ import annotations

import asyncio

from vtui.core.model import InstanceSpec
from vtui.service.probes import LeanLauncher, LeanScrapeLoop


async def _trickler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
        for _ in range(200):  # a byte every 50 ms: never idle for the client's 1 s
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.05)
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


def test_health_and_scrape_give_up_on_a_trickling_server_at_their_timeout() -> None:
    async def main() -> None:
        server = await asyncio.start_server(_trickler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        launcher = LeanLauncher(health_timeout=0.4)
        loop = asyncio.get_running_loop()
        try:
            spec = InstanceSpec(name="a", model="m", port=port, engine="sim")
            started = loop.time()
            assert await launcher.health(spec) is False
            assert 0.3 < loop.time() - started < 1.5
            probe = await launcher.probe(spec)
            assert (
                probe is not None and probe.status is None and "no answer within 0.4 s" in (probe.error or "")
            )
            samples: list[object] = []
            scrape = LeanScrapeLoop(
                "a", f"http://127.0.0.1:{port}", samples.append, launcher.pool, timeout=0.4
            )
            started = loop.time()
            assert await scrape.scrape() is None
            assert 0.3 < loop.time() - started < 1.5
            assert scrape.failures == 1 and "ReadTimeout" in (scrape.last_error or "") and samples == []
        finally:
            await launcher.aclose()
            server.close()

    asyncio.run(main())
