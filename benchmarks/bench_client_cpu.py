"""Client CPU cost per streamed token: vtui's client (lean asyncio HTTP, and with VTUI_BENCH_HTTP=httpx its
httpx fallback) vs `vllm bench serve`'s own aiohttp request function, same server (vtui's sim, started
here), same workload, each measured after a 16-request warm-up in the same process (lazy imports and
first connections out of the figure). CPU seconds are what a client steals from a server sharing a small
machine; they move less than wall-clock figures when other processes load it, but they do move.

    python benchmarks/bench_client_cpu.py [--requests 256 --concurrency 8 --output-len 32 --reps 3] [--out F]
Needs the real-vLLM test venv (~/.cache/vtui-test/venv) for the vllm side.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import _smoke
import httpx

TEST_HOME = Path(os.environ.get("VTUI_TEST_HOME", str(Path.home() / ".cache" / "vtui-test")))

VTUI_CLIENT = textwrap.dedent("""
    import asyncio, json, resource, sys, time
    from vtui.bench import BenchConfig, run_bench
    base, n, c, out_len, inp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    def config(count):
        return BenchConfig(base, concurrency=c, num_requests=count, input_len=inp, output_len=out_len,
                           scrape_metrics=False)
    asyncio.run(run_bench(config(16)))  # warm-up: lazy imports, first connections
    r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter()
    res = asyncio.run(run_bench(config(n)))
    r1 = resource.getrusage(resource.RUSAGE_SELF); t1 = time.perf_counter()
    s = res.steps[0]
    print(json.dumps({"cpu_s": r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, "wall_s": t1 - t0,
                      "tokens": round(s.output_tok_per_s * s.duration_s), "ok": s.completed, "req_per_s": s.req_per_s}))
""")

VLLM_CLIENT = textwrap.dedent("""
    import asyncio, json, random, resource, sys, time
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncInput, async_request_openai_completions
    base, n, c, out_len, inp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    async def main(count, model):
        rng = random.Random(0)
        sem = asyncio.Semaphore(c)
        connector = aiohttp.TCPConnector(limit=c, keepalive_timeout=60)
        async with aiohttp.ClientSession(connector=connector, trust_env=True,
                                         timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)) as session:
            async def one(i):
                async with sem:
                    return await async_request_openai_completions(RequestFuncInput(
                        prompt=[rng.randrange(100, 1000) for _ in range(inp)], api_url=base + "/v1/completions",
                        prompt_len=inp, output_len=out_len, model=model, ignore_eos=True), session)
            return await asyncio.gather(*(one(i) for i in range(count)))
    async def get_model():
        async with aiohttp.ClientSession() as session:
            return (await (await session.get(base + "/v1/models")).json())["data"][0]["id"]
    model = asyncio.run(get_model())
    asyncio.run(main(16, model))  # warm-up: lazy imports, first connections
    r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter()
    outs = asyncio.run(main(n, model))
    r1 = resource.getrusage(resource.RUSAGE_SELF); t1 = time.perf_counter()
    ok = [o for o in outs if o.success]
    print(json.dumps({"cpu_s": r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, "wall_s": t1 - t0,
                      "tokens": sum(o.output_tokens for o in ok), "ok": len(ok), "req_per_s": len(ok) / (t1 - t0)}))
""")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--sim-speed", type=float, default=20.0, help="lower: slower steps, ~1 token per read"
    )
    parser.add_argument(
        "--tools", default="vtui,vtui-httpx,vllm", help="comma-separated: vtui, vtui-httpx, vllm"
    )
    parser.add_argument("--out", type=Path, default=None)
    # a smoke run: vtui's clients only (the vllm one runs in the real-vLLM test venv)
    _smoke.tiny(parser, requests=2, concurrency=1, output_len=4, input_len=8, reps=1, tools="vtui,vtui-httpx")
    args = parser.parse_args()
    tools = args.tools.split(",")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vtui.sim",
            str(TEST_HOME / "tiny-llama"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            "512",
            "--max-num-seqs",
            str(args.concurrency),
            "--kv-cache-memory-bytes",
            "64M",
            "--sim-startup-scale",
            "0",
            "--sim-speed",
            str(args.sim_speed),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    runs = []
    try:
        for _ in range(100):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        sim_args = [
            base,
            str(args.requests),
            str(args.concurrency),
            str(args.output_len),
            str(args.input_len),
        ]
        clients = {
            "vtui": (sys.executable, VTUI_CLIENT, {}),
            "vtui-httpx": (sys.executable, VTUI_CLIENT, {"VTUI_BENCH_HTTP": "httpx"}),
            "vllm": (str(TEST_HOME / "venv" / "bin" / "python"), VLLM_CLIENT, {}),
        }
        for _ in range(args.reps):
            for tool in tools:
                python, code, env = clients[tool]
                out = subprocess.run(
                    [python, "-c", code, *sim_args],
                    capture_output=True,
                    text=True,
                    timeout=600,
                    env={**os.environ, **env},
                )
                if out.returncode != 0:
                    raise RuntimeError(f"{tool}: {out.stderr[-1500:]}")
                run = {"tool": tool, **json.loads(out.stdout.strip().splitlines()[-1])}
                run["cpu_us_per_token"] = 1e6 * run["cpu_s"] / max(1, run["tokens"])
                runs.append(run)
                print(json.dumps(run), file=sys.stderr)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)
    summary = {}
    for tool in tools:
        mine = sorted(r["cpu_us_per_token"] for r in runs if r["tool"] == tool)
        summary[tool] = {
            "cpu_us_per_token_median": mine[len(mine) // 2],
            "req_per_s_median": sorted(r["req_per_s"] for r in runs if r["tool"] == tool)[len(mine) // 2],
        }
    workload = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    text = json.dumps({"workload": workload, "runs": runs, "summary": summary}, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
