"""vtui's closed loop in lock-step vs de-synchronised streams (`--jitter`, as guidellm and aiperf run):
TTFT p50 against one simulated Qwen3-8B. Usage: python benchmarks/bench_jitter_ttft.py [-c 16] [-n 96]"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time
import urllib.request

import _smoke

from vtui.bench import BenchConfig, run_bench


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", type=int, default=16)
    parser.add_argument("-n", type=int, default=96)
    parser.add_argument("--jitter", type=float, default=0.5)
    _smoke.tiny(parser, c=1, n=2, jitter=0.01)
    args = parser.parse_args()
    port = _free_port()
    sim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vtui",
            "sim",
            "Qwen/Qwen3-8B",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--sim-startup-scale",
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        for jitter, stddev in ((0.0, 0.0), (args.jitter, 0.0), (args.jitter, 40.0)):
            config = BenchConfig(
                base_url=f"http://127.0.0.1:{port}",
                concurrency=args.c,
                num_requests=args.n,
                output_len=32,
                jitter_s=jitter,
                input_len_stddev=stddev,
            )
            step = asyncio.run(run_bench(config)).steps[0]
            print(
                f"jitter {jitter:.2f} s, input stddev {stddev:g}: TTFT p50 {step.ttft.p50 * 1000:.1f} ms "
                f"(server mean {(step.server.ttft.mean or 0) * 1000:.1f} ms), {step.req_per_s:.1f} req/s"
            )
    finally:
        sim.terminate()
        sim.wait(10)


if __name__ == "__main__":
    main()
