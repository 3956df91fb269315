"""Starting vs tuned flags on the demo layout's instances (the shipped `demo` layout, sim engine).

The demo layout is copied into a private state dir with free ports, `sim-load` off (its background
clients would load the server beside the bench step) and the sim's startup delay off (restarts in
seconds); each instance is then tuned in turn with `vtui tune NAME --json` under one TTFT SLO and one
workload, restarting only that instance (the two small models keep sharing GPU 6). The figures: each
instance's starting flags and result beside the tuned ones, the launched and the plan-scored trials,
the restarts and the wall time.

    python benchmarks/bench_tune_demo.py [--ttft-p95-ms 500] [--concurrency 64] [--max-trials 10]
                                         [--out benchmarks/results/bench_tune_demo.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _smoke

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
KEYS = ("max-num-seqs", "max-num-batched-tokens", "enable-chunked-prefill", "gpu-memory-utilization")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _vtui(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args], capture_output=True, text=True, timeout=timeout
    )


def demo_copy(folder: Path) -> Path:
    from vtui.layouts.lookup import BUILTIN_DIR

    text = (BUILTIN_DIR / "demo.toml").read_text()
    text = re.sub(r"^port = \d+$", lambda _m: f"port = {_free_port()}", text, flags=re.M)
    text = re.sub(r"^sim-load = \d+$", "sim-startup-scale = 0.0", text, flags=re.M)
    text = text.replace('name = "demo"', f'name = "tunedemo{os.getpid()}"', 1)
    path = folder / "demo.toml"
    path.write_text(text)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ttft-p95-ms", type=float, default=500.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--num-requests", type=int, default=128)
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--max-trials", type=int, default=10)
    parser.add_argument("--only", nargs="*", default=None, help="tune only these instances")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_tune_demo.json")
    # a smoke run: the first instance, one trial, and the recorded results left as they are (no --out)
    _smoke.tiny(parser, concurrency=2, num_requests=4, input_len=32, output_len=4, max_trials=1, out=None)
    args = parser.parse_args()

    state = tempfile.mkdtemp(prefix="vtui-bench-tune-demo-")
    os.environ.update({"VTUI_STATE_DIR": state, "VTUI_SUPERVISOR_GPU": "0", "VTUI_SUPERVISOR_IDLE_S": "60"})
    os.environ["PYTHONPATH"] = str(ROOT)
    layout = demo_copy(Path(state))
    up = _vtui("up", str(layout))
    if up.returncode != 0:
        print(up.stdout + up.stderr, file=sys.stderr)
        return 1
    rows = []
    try:
        from vtui.layouts import load_layout

        names = args.only or load_layout(layout).names()[: 1 if _smoke.on() else None]
        for name in names:
            t0 = time.monotonic()
            result = _vtui(
                "tune",
                str(layout),
                name,
                "--ttft-p95-ms",
                str(args.ttft_p95_ms),
                "--concurrency",
                str(args.concurrency),
                "--num-requests",
                str(args.num_requests),
                "--input-len",
                str(args.input_len),
                "--output-len",
                str(args.output_len),
                "--max-trials",
                str(args.max_trials),
                "--warmup",
                "4",
                "--json",
            )
            wall = time.monotonic() - t0
            if result.returncode != 0:
                print(f"{name}: tune failed ({result.returncode}): {result.stderr[-800:]}", file=sys.stderr)
                rows.append({"instance": name, "error": result.stderr[-800:]})
                continue
            doc = json.loads(result.stdout)
            row = {
                "instance": name,
                "start": {k: doc["baseline"]["flags"].get(k) for k in KEYS},
                "tuned": {k: doc["best"]["flags"].get(k) for k in KEYS},
                "start_rps": doc["baseline"]["goodput_rps"],
                "start_ttft_p95_ms": doc["baseline"]["ttft_p95_ms"],
                "start_meets_slo": doc["baseline"]["meets_slo"],
                "tuned_rps": doc["best"]["goodput_rps"],
                "tuned_ttft_p95_ms": doc["best"]["ttft_p95_ms"],
                "tuned_meets_slo": doc["best"]["meets_slo"],
                "gain": round(doc["best"]["goodput_rps"] / doc["baseline"]["goodput_rps"], 3)
                if doc["baseline"]["goodput_rps"]
                else None,
                "launched": sum(t["measurements"] for t in doc["trials"] if t["launched"]),
                "scored_from_plan": sum(1 for t in doc["trials"] if not t["launched"]),
                "restarts": doc["restarts"],
                "wall_s": round(wall, 1),
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        _vtui("down", str(layout))
    out = {"settings": {**vars(args), "out": str(args.out), "only": args.only}, "instances": rows}
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(markdown(out) + "\n")
    print(markdown(out))
    return 1 if any("error" in row for row in rows) else 0


def markdown(doc: dict) -> str:
    s = doc["settings"]
    lines = [
        f"Starting vs tuned flags on the demo layout (sim): TTFT p95 SLO {s['ttft_p95_ms']:g} ms, "
        f"{s['concurrency']} in flight, {s['input_len']} in / {s['output_len']} out tokens, "
        f"at most {s['max_trials']} launched trials (+2 re-measures) per instance.",
        "",
        "| instance | start: seqs, batched | start req/s (TTFT p95, SLO) | tuned: seqs, batched, chunked "
        "| tuned req/s (TTFT p95, SLO) | gain | launched / from plan | restarts | wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["instances"]:
        if "error" in r:
            lines.append(f"| {r['instance']} | failed: {r['error'][:80]} |||||||")
            continue
        st, tu = r["start"], r["tuned"]
        lines.append(
            f"| {r['instance']} | {st['max-num-seqs']}, {st['max-num-batched-tokens']} "
            f"| {r['start_rps']:.2f} ({r['start_ttft_p95_ms']:.0f} ms, {'meets' if r['start_meets_slo'] else 'misses'}) "
            f"| {tu['max-num-seqs']}, {tu['max-num-batched-tokens']}, {tu['enable-chunked-prefill']} "
            f"| {r['tuned_rps']:.2f} ({r['tuned_ttft_p95_ms']:.0f} ms, {'meets' if r['tuned_meets_slo'] else 'misses'}) "
            f"| {r['gain']}× | {r['launched']} / {r['scored_from_plan']} | {r['restarts']} | {r['wall_s']} s |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
