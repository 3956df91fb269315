"""Benchmark of `vtui sim`: the streaming tokens/s ceiling of one instance (concurrent SSE clients, sim pinned
to one core and its speed model turned up so the CPU is the limit), startup time to /health at startup
scale 0 and at the default, and the RSS of one instance (idle and after load).

    python benchmarks/bench_sim.py [--clients 64] [--seconds 8] [--max-tokens 512]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import _smoke


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*flags: str, core: int | None = None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "vtui.sim",
        "Qwen/Qwen3-8B",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--disable-uvicorn-access-log",
        *flags,
    ]
    pre = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=pre,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": str(7 - (core or 0))},
    )
    return proc, port


def wait_health(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"sim exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:
            time.sleep(0.01)
    raise SystemExit("sim never became healthy")


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def client(port: int, max_tokens: int, deadline: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps(
        {"prompt": "benchmark " * 20, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    ).encode()
    request = (
        f"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    while time.monotonic() < deadline:
        writer.write(request)
        buf = bytearray()
        while not buf.endswith(b"0\r\n\r\n"):
            chunk = await reader.read(1 << 16)
            if not chunk:
                return
            buf += chunk
        counts[0] += buf.count(b'"finish_reason":null')
    writer.close()


async def load(port: int, clients: int, seconds: float, max_tokens: int) -> float:
    counts = [0]
    warm = time.monotonic() + 1.0
    await asyncio.gather(*(client(port, max_tokens, warm, [0]) for _ in range(clients)))
    t0 = time.monotonic()
    await asyncio.gather(*(client(port, max_tokens, t0 + seconds, counts) for _ in range(clients)))
    return counts[0] / (time.monotonic() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--max-tokens", type=int, default=512)
    _smoke.tiny(ap, clients=1, seconds=0.2, max_tokens=8)
    opts = ap.parse_args()
    results: dict[str, float] = {}
    for scale in ("0",) if _smoke.on() else ("0", "1"):  # a smoke run skips the default's seconds-long start
        proc, port = start("--sim-startup-scale", scale)
        try:
            results[f"startup_to_health_s_scale_{scale}"] = round(wait_health(port, proc), 3)
        finally:
            proc.terminate()
            proc.wait()
    multi = os.cpu_count() and os.cpu_count() >= 2
    proc, port = start(
        "--sim-startup-scale", "0", "--sim-speed", "1e6", "--max-num-seqs", "1024", core=0 if multi else None
    )
    try:
        wait_health(port, proc)
        results["rss_idle_mib"] = round(rss_mib(proc.pid), 1)
        if multi:
            os.sched_setaffinity(0, {1})
        results["tokens_per_s_one_core"] = round(
            asyncio.run(load(port, opts.clients, opts.seconds, opts.max_tokens))
        )
        results["rss_after_load_mib"] = round(rss_mib(proc.pid), 1)
        results["clients"] = opts.clients
    finally:
        proc.terminate()
        results["sigterm_exit_code"] = proc.wait(timeout=10)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
