"""ScrapeLoop against real local HTTP servers: samples flow; a hung server never gets a pile of requests;
an instance that is down is polled slowly; stop() ends the loop promptly. The pauses between scrapes are
a virtual clock's: counted exactly, never waited for."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import httpx
import pytest
from _support.clock import VirtualClock

from vtui.telemetry.scrape import ScrapeLoop


class _Server:
    """A tiny HTTP/1.1 server: answers `body` (or hangs when body is None) and counts connections."""

    def __init__(self, body: str | None) -> None:
        self.body = body
        self.requests = 0
        self.open = 0
        self.max_open = 0
        self.paths: list[str] = []
        self.auth: list[str | None] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            lines = head.decode().split("\r\n")
            self.paths.append(lines[0].split(" ")[1])
            auth = [ln.split(":", 1)[1].strip() for ln in lines if ln.lower().startswith("authorization:")]
            self.auth.append(auth[0] if auth else None)
            if self.body is None:
                await reader.read()  # hang until the client gives up and closes
                return
            data = self.body.encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(data)}\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()

    @contextlib.asynccontextmanager
    async def serve(self):
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()
            await server.wait_closed()


async def _run_until(loop: ScrapeLoop, clock: VirtualClock, scrapes: int) -> None:
    """Run `loop` on `clock` until it has started `scrapes` scrapes and the last one has ended."""
    task = asyncio.create_task(loop.run())
    await clock.run_until(lambda: loop.scrapes == scrapes and loop.in_flight == 0)
    loop.stop()
    await asyncio.wait_for(task, 2.0)  # stop() cuts the pause short


async def test_samples_are_posted(fixture_text) -> None:
    server = _Server(fixture_text("metrics_busy.txt"))
    samples = []
    clock = VirtualClock(1000.0)
    async with server.serve() as url:
        loop = ScrapeLoop(
            "a", url + "/", samples.append, interval=0.25, timeout=1.0, api_key="sk-test", clock=clock
        )
        await _run_until(loop, clock, scrapes=4)
    assert samples[0].instance == "a" and samples[0].running == 8.0
    assert server.paths[0] == "/metrics"
    assert server.auth[0] == "Bearer sk-test"
    assert [s.at for s in samples] == [1000.0, 1000.25, 1000.5, 1000.75]  # every interval, clock time
    assert samples[-1].prompt_tps == 0.0  # same payload: a rate of 0, not None


async def test_hung_server_gets_one_request_at_a_time() -> None:
    server = _Server(None)
    errors: list[str] = []
    samples = []
    clock = VirtualClock()
    async with server.serve() as url:
        loop = ScrapeLoop(
            "a",
            url,
            samples.append,
            interval=0.01,
            timeout=0.05,
            down_interval=0.3,
            on_error=errors.append,
            clock=clock,
        )
        await _run_until(loop, clock, scrapes=4)
        while server.open:  # the server sees the last close
            await asyncio.sleep(0)
    assert not samples
    assert server.max_open == 1  # never a pile of requests behind the hung one
    assert server.requests == 4
    # each attempt gives up after the timeout; 2 quick ones, then one per down interval
    assert clock.slept[:3] == pytest.approx([0.01, 0.3, 0.3])  # to the grid's ticks
    assert loop.down and errors == ["no answer from " + url + "/metrics within 0.05 s"] * 4
    assert loop.in_flight == 0


async def test_refused_connection_counts_as_down() -> None:
    samples = []
    clock = VirtualClock()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        loop = ScrapeLoop(
            "a",
            f"http://127.0.0.1:{port}",
            samples.append,
            interval=0.01,
            timeout=0.5,
            down_interval=10.0,
            clock=clock,
        )
        await _run_until(loop, clock, scrapes=3)
    assert clock.slept[:2] == pytest.approx(
        [0.01, 10.0]
    )  # down after 2 failures: then the 10 s down interval
    assert clock.time() == pytest.approx(1010.01)
    assert loop.down and "ConnectError" in (loop.last_error or "")


async def test_http_error_status_is_a_failure() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="starting")

    loop = ScrapeLoop("a", "http://x", lambda s: None, transport=httpx.MockTransport(handler))
    assert await loop.scrape_once() is None
    assert loop.last_error == "HTTP 503 from http://x/metrics"


async def test_stop_before_run_returns_at_once() -> None:
    loop = ScrapeLoop("a", "http://127.0.0.1:9", lambda s: None)
    loop.stop()
    await asyncio.wait_for(loop.run(), 1.0)
    assert loop.scrapes == 0


async def test_recovery_after_down(fixture_text) -> None:
    state = {"up": False}

    def handler(request: httpx.Request) -> httpx.Response:
        if not state["up"]:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, text=fixture_text("metrics_idle.txt"))

    samples = []
    loop = ScrapeLoop("a", "http://x", samples.append, transport=httpx.MockTransport(handler))
    await loop.scrape_once()
    await loop.scrape_once()
    assert loop.down
    state["up"] = True
    sample = await loop.scrape_once()
    assert sample is not None and not loop.down and loop.last_error is None
    assert samples == [sample]


@pytest.mark.parametrize("base", ["http://h:1", "http://h:1/"])
def test_url(base: str) -> None:
    assert ScrapeLoop("a", base, lambda s: None).url == "http://h:1/metrics"
