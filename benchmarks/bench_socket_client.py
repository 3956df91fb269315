"""What the one client of the session socket costs with h11 (vtui's, `vtui.service.client`) against httpx
over the same Unix socket: the import (a fresh interpreter each time: what `vtui ps` pays before its
first byte), one request on its own connection to a running session supervisor (`GET /status`, blocking
as the CLI asks, and on asyncio as the dashboard does; wall and this process's CPU), and the feed's
lines read off a stream (CPU per line: the dashboard reads every sample and log line of every instance).

    python benchmarks/bench_socket_client.py [--requests 200] [--lines 20000] [--imports 7]

The requests go to a session of one sim instance brought up for the run (`_smoke.sim_session`); the
feed is a stand-in process that writes `--lines` copies of one real feed line from that session (a
metrics sample, ~1.4 kB) in 64-line chunks, as the supervisor's feed sends a busy loop turn. Medians
of the repeats. Smoke: 5 requests, 200 lines, 1 import each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _smoke
import httpx

from vtui.service import client as vtui_client
from vtui.service import locations

RESULTS = Path(__file__).resolve().parent / "results" / "bench_socket_client.json"

FEED_SERVER = r"""
import os, socket, sys
path, line, count = sys.argv[1], sys.argv[2].encode() + b"\n", int(sys.argv[3])
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(4096)
    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n")
    left = count
    while left:
        n = min(64, left)
        chunk = line * n
        conn.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        left -= n
    conn.sendall(b"0\r\n\r\n")
    conn.close()
"""


def import_ms(module: str, repeat: int) -> float:
    """Median ms to import `module` in a fresh interpreter (vtui's own package imported first, as the
    CLI has by then)."""
    code = "import time, vtui; t = time.perf_counter(); import " + module + "; print(time.perf_counter() - t)"
    times = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
        for _ in range(repeat)
    ]
    return round(statistics.median(times) * 1e3, 2)


def timed(fn: Callable[[], Any], n: int) -> dict[str, float]:
    """Per call: median wall ms, and this process's CPU ms (all calls' CPU over n)."""
    walls = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    cpu = (time.process_time() - cpu0) / n
    return {"wall_ms": round(statistics.median(walls) * 1e3, 3), "cpu_ms": round(cpu * 1e3, 3)}


async def atimed(fn: Callable[[], Any], n: int) -> dict[str, float]:
    walls = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        walls.append(time.perf_counter() - t0)
    cpu = (time.process_time() - cpu0) / n
    return {"wall_ms": round(statistics.median(walls) * 1e3, 3), "cpu_ms": round(cpu * 1e3, 3)}


def requests(session: str, n: int) -> dict[str, Any]:
    sock = locations.socket_path(session)
    ours = vtui_client.ServiceClient(session)
    target = "/status"
    out: dict[str, Any] = {"status_bytes": len(json.dumps(ours.get(target)))}
    transport = httpx.HTTPTransport(uds=str(sock))
    with httpx.Client(transport=transport, base_url="http://vtui") as client:
        close = {"connection": "close"}  # one connection a request, as the CLI's
        out["sync_h11"] = timed(lambda: ours.get(target), n)
        out["sync_httpx"] = timed(lambda: client.get(target, headers=close).json(), n)

    async def both() -> None:
        who = "bench"
        out["async_h11"] = await atimed(lambda: vtui_client.request(sock, "GET", target, who=who), n)
        atransport = httpx.AsyncHTTPTransport(uds=str(sock))
        async with httpx.AsyncClient(transport=atransport, base_url="http://vtui") as aclient:

            async def one() -> Any:
                return (await aclient.get(target, headers=close)).json()

            out["async_httpx"] = await atimed(one, n)

    asyncio.run(both())
    return out


def a_feed_line(session: str) -> str:
    """One metrics sample line as the supervisor's feed sends it (else its hello, cut to one line)."""
    deadline = time.monotonic() + 20
    for message in vtui_client.ServiceClient(session).feed(timeout=20):
        if message.get("type") == "sample" or time.monotonic() > deadline:
            return json.dumps(message)
    raise RuntimeError("the feed ended before a sample")


def feed(line: str, count: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "feed.sock"
        server = subprocess.Popen(
            [sys.executable, "-c", FEED_SERVER, str(path), line, str(count)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"

            async def h11_lines() -> int:
                got = 0
                async for _ in vtui_client.feed_lines(await vtui_client.open_feed(path)):
                    got += 1
                return got

            async def httpx_lines() -> int:
                got = 0
                transport = httpx.AsyncHTTPTransport(uds=str(path))
                async with httpx.AsyncClient(
                    transport=transport, base_url="http://vtui", timeout=60
                ) as client:
                    async with client.stream("GET", "/feed") as response:
                        async for text in response.aiter_lines():
                            got += bool(text)
                return got

            out: dict[str, Any] = {"line_bytes": len(line) + 1, "lines": count}
            for name, read in (("h11", h11_lines), ("httpx", httpx_lines)):
                per_line = []
                for _ in range(repeat):
                    cpu0 = time.process_time()
                    got = asyncio.run(read())
                    per_line.append((time.process_time() - cpu0) / got * 1e6)
                    assert got == count, (name, got)
                out[f"{name}_cpu_us_per_line"] = round(statistics.median(per_line), 2)
            return out
        finally:
            server.kill()
            server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--imports", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="passes over the feed, per client")
    parser.add_argument("--out", type=Path, default=RESULTS)
    _smoke.tiny(parser, requests=5, lines=200, imports=1, repeat=1)
    args = parser.parse_args()

    result: dict[str, Any] = {
        "import_ms": {
            m: import_ms(m, args.imports) for m in ("h11", "vtui.service.client", "http.client", "httpx")
        }
    }
    with _smoke.sim_session() as (session, _layout):
        result["requests"] = requests(session, args.requests)
        line = a_feed_line(session)
    result["feed"] = feed(line, args.lines, args.repeat)
    result["load_avg"] = [round(x, 2) for x in __import__("os").getloadavg()]
    print(json.dumps(result, indent=2))
    if not _smoke.on():
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
