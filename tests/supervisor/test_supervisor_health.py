"""The one /health probe (`supervisor.health.HealthProbe`): which client takes which instance (the lean
one for plain http without a key, httpx for the rest: unverified for vtui's own processes, verified
with the key for attached servers), and what a probe says on an answer, a refusal and a timeout."""

from __future__ import annotations

import asyncio
import socket

import httpx

from vtui.core.model import InstanceSpec
from vtui.service.probes import LeanLauncher
from vtui.supervisor.attached import Probe
from vtui.supervisor.health import HealthProbe
from vtui.telemetry.scrape import HttpxFetch

LAUNCHED = InstanceSpec("a", "m", 8100, engine="sim")
PLAIN = InstanceSpec("p", "", 8000, host="10.0.0.9", engine="external", url="http://10.0.0.9:8000")
KEYED = InstanceSpec(
    "k", "", 8000, host="10.0.0.9", engine="external", url="http://10.0.0.9:8000", api_key="k3y"
)
TLS = InstanceSpec("t", "", 443, host="gpu.example", engine="external", url="https://gpu.example")


async def test_each_instance_gets_its_client() -> None:
    bare = HealthProbe()
    assert bare.fetcher(LAUNCHED) is bare.own and bare.fetcher(PLAIN) is bare.attached
    assert bare.own.verify is False and bare.own.trust_env is False  # our own process: plain http
    assert bare.attached.verify is True  # someone else's server: TLS checked
    launcher = LeanLauncher()
    try:
        probe = launcher.health_probe
        lean = probe.fast
        assert lean is not None
        assert [probe.fetcher(s) for s in (LAUNCHED, PLAIN, KEYED, TLS)] == [
            lean,
            lean,
            probe.attached,  # a key to send
            probe.attached,  # https
        ]
    finally:
        await launcher.aclose()


async def test_a_probe_sends_an_attached_servers_key_and_reports_the_status() -> None:
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers.get("authorization")))
        return httpx.Response(503 if request.url.host == "10.0.0.9" else 200)

    probe = HealthProbe()
    probe.attached = HttpxFetch(transport=httpx.MockTransport(handler))
    probe.own = HttpxFetch(transport=httpx.MockTransport(handler))
    assert await probe.probe(KEYED) == Probe(503)
    assert await probe.probe(TLS) == Probe(200)
    assert await probe.healthy(LAUNCHED) is True
    assert seen == [
        ("http://10.0.0.9:8000/health", "Bearer k3y"),
        ("https://gpu.example/health", None),
        ("http://127.0.0.1:8100/health", None),  # a launched instance's key is not sent to /health
    ]
    await probe.aclose()


async def test_refused_and_silent_servers_say_why() -> None:
    with socket.socket() as bound:  # bound, not listening: connection refused
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        launcher = LeanLauncher(health_timeout=0.3)
        for launcher_probe in (HealthProbe(timeout=0.3), launcher.health_probe):  # httpx, then lean
            spec = InstanceSpec("x", "", port, engine="external", url=f"http://127.0.0.1:{port}")
            refused = await launcher_probe.probe(spec)
            assert refused.status is None and "connection refused" in (refused.error or ""), refused
            assert await launcher_probe.healthy(InstanceSpec("y", "m", port, engine="sim")) is False
            await launcher_probe.aclose()
        await launcher.aclose()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        launcher = LeanLauncher(health_timeout=0.2)
        for launcher_probe in (HealthProbe(timeout=0.2), launcher.health_probe):
            spec = InstanceSpec("x", "", port, engine="external", url=f"http://127.0.0.1:{port}")
            assert await launcher_probe.probe(spec) == Probe(None, "no answer within 0.2 s")
        await launcher.aclose()
    finally:
        server.close()
