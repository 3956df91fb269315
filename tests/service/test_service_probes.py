"""The supervisor's lean probes (`service.probes`): a /health probe and a /metrics scrape are bounded as a
whole (a server that trickles bytes is given up on at the timeout, not kept alive by each byte); the
liveness look (pidfds, else /proc) follows the leader and reaps the pump."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from vtui.core.model import InstanceSpec
from vtui.service.probes import LeanFetch, LeanLauncher
from vtui.supervisor.handle import ProcessHandle
from vtui.telemetry.scrape import ScrapeLoop


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
            scrape = ScrapeLoop(
                "a", f"http://127.0.0.1:{port}", samples.append, fetch=LeanFetch(launcher.pool), timeout=0.4
            )
            started = loop.time()
            assert await scrape.scrape() is None
            assert 0.3 < loop.time() - started < 1.5
            assert scrape.failures == 1 and "ReadTimeout" in (scrape.last_error or "") and samples == []
        finally:
            await launcher.aclose()
            server.close()

    asyncio.run(main())


def _handle(
    proc: subprocess.Popen[bytes], pump: subprocess.Popen[bytes] | None, tmp_path: Path
) -> ProcessHandle:
    return ProcessHandle(
        pid=proc.pid,
        create_time=psutil.Process(proc.pid).create_time(),
        pgid=os.getpgid(proc.pid),
        sid=os.getsid(proc.pid),
        key="t/a",
        log_path=tmp_path / "a.log",
        argv=("sleep", "30"),
        popen=pump,
    )


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfd", "proc"])
def test_alive_follows_the_leader_and_reaps_the_pump(tmp_path: Path, pidfds: bool) -> None:
    """Alive while it runs; not once it ended, reaped or a zombie still; not for a recycled pid (another
    create time); and a pump that ended is reaped, not left a zombie. Both ways: pidfds, /proc reads."""
    launcher = LeanLauncher()
    launcher._exits.usable = launcher._exits.usable and pidfds
    leader = subprocess.Popen(["sleep", "30"])
    pump = subprocess.Popen(["sleep", "30"])
    try:
        handle = _handle(leader, pump, tmp_path)
        for _ in range(3):  # the first look verifies, the later ones are the cheap ones
            assert launcher.alive(handle)
        assert bool(launcher._exits._fds) is launcher._exits.usable  # the leader's and the pump's pidfds
        assert launcher.alive(dataclasses.replace(handle, create_time=handle.create_time - 5)) is False
        pump.kill()
        deadline = time.monotonic() + 5
        while pump.returncode is None and time.monotonic() < deadline:
            assert launcher.alive(handle)  # the leader runs on
            time.sleep(0.02)
        assert pump.returncode is not None  # reaped by alive()
        leader.kill()  # not reaped: a zombie, which is not alive
        deadline = time.monotonic() + 5
        while launcher.alive(handle) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not launcher.alive(handle)
        assert psutil.Process(leader.pid).status() == psutil.STATUS_ZOMBIE
        leader.wait()
        assert not launcher.alive(handle)
    finally:
        for proc in (leader, pump):
            proc.kill()
            proc.wait()
        asyncio.run(launcher.aclose())
    assert launcher._exits._fds == {}


def test_a_restamped_sample_is_sent_as_a_fresh_encoding_would_be(monkeypatch) -> None:
    """The service encodes a steady server's sample from the last encoding (its time changed alone);
    what it stores and sends equals encode_sample's, through busy, steady and restarted runs."""
    from types import SimpleNamespace

    from vtui.service import scraping
    from vtui.service.scraping import Scrapers
    from vtui.service.wire import encode_sample

    encodings: list[int] = []
    monkeypatch.setattr(scraping, "encode_sample", lambda s: encodings.append(1) or encode_sample(s))
    from vtui.telemetry.metrics import MetricsWindow
    from vtui.telemetry.promtext import MetricsParser

    fixtures = Path(__file__).parents[1] / "telemetry" / "fixtures"
    busy, idle = ((fixtures / f"metrics_{n}.txt").read_bytes() for n in ("busy", "idle"))
    lines: list[bytes] = []
    feed = SimpleNamespace(  # a client listens (truthy); a sample is held (sent with the next batch)
        broadcast_line=lambda line, held=False: lines.append(line) if held else None,
    )
    supervisor = SimpleNamespace(observe_load=lambda *a, **kw: None)
    scrapers = Scrapers(supervisor, feed, spawn=None, log=print)  # type: ignore[arg-type]
    window, parser = MetricsWindow(window_s=2.5), MetricsParser()
    samples = []
    for i, body in enumerate([busy, *[idle] * 8, busy, busy, *[idle] * 6]):
        sample = window.update(parser.parse_bytes(body), 100.0 + i, "a")
        samples.append(sample)
        scrapers.on_sample("a", sample)
    assert list(scrapers.samples["a"]) == [encode_sample(s) for s in samples]
    assert lines == [  # byte for byte the line a full encoding gives (the feed's `_broadcast`)
        (json.dumps({"type": "sample", "sample": encode_sample(s)}, separators=(",", ":")) + "\n").encode()
        for s in samples
    ]
    assert [json.loads(line)["sample"]["at"] for line in lines] == [100.0 + i for i in range(len(samples))]
    assert 0 < len(encodings) < len(samples) - 6  # the steady runs' later samples were not encoded again


def test_a_scrape_loop_outlives_an_error_in_handling_a_sample(capsys) -> None:
    """A bug in what takes a sample (once, a sample the feed could not encode) is written to the
    supervisor's log and the loop goes on scraping: the instance's gauges must not freeze for good."""
    body = (Path(__file__).parents[1] / "telemetry" / "fixtures" / "metrics_idle.txt").read_bytes()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        launcher = LeanLauncher()
        taken: list[object] = []

        def sink(sample: object) -> None:
            taken.append(sample)
            if len(taken) == 1:
                raise TypeError("vars() argument must have __dict__ attribute")

        loop = ScrapeLoop(
            "a", f"http://127.0.0.1:{port}", sink, fetch=LeanFetch(launcher.pool), interval=0.05
        )
        task = asyncio.create_task(loop.run())
        try:
            for _ in range(100):
                if len(taken) >= 3:
                    break
                await asyncio.sleep(0.05)
        finally:
            loop.stop()
            await asyncio.wait_for(task, 2)
            await launcher.aclose()
            server.close()
        assert len(taken) >= 3 and loop.last_error is None  # the scrapes after the error went through

    asyncio.run(main())
    assert "a: vtui could not read" in capsys.readouterr().err
