"""The session supervisor's own cost, at 8 sim instances refreshed at 1 Hz (a /metrics scrape and a
/health probe per instance per second, the log tick at 5 Hz, one feed client attached):

- supervisor CPU, % of one core: its process's CPU time (user + system, not its instances') over a
  steady window, divided by the window (target ≤ 0.5 %);
- a CLI round trip: `python -m vtui ps` wall time, Python start included (target ≤ 150 ms);
- event → client: a feed client's receive time minus the event's own time stamp (`StateChanged.at`,
  the supervisor's `time.time()`), over restarts of the instances; and the same for metrics samples
  (scrape time → client). Target p95 ≤ 100 ms.

Everything runs in a temporary state dir; the instances and the supervisor are stopped at the end.

    python benchmarks/bench_service.py [--instances 8] [--window 30] [--scrape-s 1] [--out FILE.json [--label L]]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import _smoke

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def layout_text(session: str, n: int) -> str:
    parts = [f'[session]\nname = "{session}"\nallow_gpu_sharing = true\n']
    for i in range(n):
        parts.append(
            f"""
[[instance]]
name = "i{i}"
engine = "sim"
model = "Qwen/Qwen3-0.6B"
port = {free_port()}
gpus = [{i % 8}]
restart = "never"
[instance.flags]
max-model-len = 4096
sim-startup-scale = 0.0
"""
        )
    return "".join(parts)


def vtui(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args], capture_output=True, text=True, env=env, timeout=300
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--window", type=float, default=30.0, help="seconds of steady-state CPU sampling")
    parser.add_argument("--ps-runs", type=int, default=20)
    parser.add_argument("--restarts", type=int, default=3, help="restart rounds (all instances) for latency")
    parser.add_argument(
        "--scrape-s",
        type=float,
        default=1.0,
        help="supervisor's /metrics interval (0: none; isolates its cost)",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--label",
        default=None,
        help="with --out: store the figures under this key of FILE (e.g. before, after)",
    )
    _smoke.tiny(parser, instances=1, window=0.5, ps_runs=1, restarts=1)
    args = parser.parse_args()

    import psutil

    tmp = Path(tempfile.mkdtemp(prefix="vtui-bench-service-"))
    session = f"bench{uuid.uuid4().hex[:6]}"
    env = os.environ | {
        "VTUI_STATE_DIR": str(tmp / "state"),
        "PYTHONPATH": str(ROOT),
        "VTUI_SUPERVISOR_GPU": "0",  # no NVML on most benchmark machines; the sampler would only idle
        "VTUI_SUPERVISOR_SCRAPE_S": str(args.scrape_s),
    }
    os.environ.update(env)
    path = tmp / "layout.toml"
    path.write_text(layout_text(session, args.instances))
    from vtui.service.client import ServiceClient, ServiceError, ServiceUnavailable

    result: dict[str, object] = {
        "instances": args.instances,
        "cores": os.cpu_count(),
        "scrape_s": args.scrape_s,
    }
    try:
        up = vtui("up", str(path), env=env)
        if up.returncode != 0:
            print(up.stdout, up.stderr, file=sys.stderr)
            return 1
        client = ServiceClient(session)
        sup = psutil.Process(client.get("/status")["supervisor_pid"])

        # one feed client attached throughout (as a dashboard would be); it records latencies
        state_lat: list[float] = []
        sample_lat: list[float] = []
        opened = threading.Event()

        def watch() -> None:
            for message in client.feed():
                now = time.time()
                kind = message.get("type")
                if kind == "hello":
                    opened.set()
                elif kind == "event" and message["event"]["kind"] == "state":
                    state_lat.append(now - message["event"]["at"])
                elif kind == "sample":
                    sample_lat.append(now - message["sample"]["at"])

        threading.Thread(target=watch, daemon=True).start()
        opened.wait(10)
        time.sleep(1.0 if _smoke.on() else 3.0)  # scrapers armed, first samples in

        # supervisor CPU over a steady window (no requests but the feed)
        load_start = os.getloadavg()[0]
        t0 = time.monotonic()
        c0 = sup.cpu_times()
        time.sleep(args.window)
        c1 = sup.cpu_times()
        wall = time.monotonic() - t0
        busy = (c1.user - c0.user) + (c1.system - c0.system)
        result["supervisor_cpu_pct_one_core"] = round(100.0 * busy / wall, 3)
        result["supervisor_user_sys_pct"] = [
            round(100.0 * (c1.user - c0.user) / wall, 3),
            round(100.0 * (c1.system - c0.system) / wall, 3),
        ]
        result["load_average_1m_cpu_window"] = [round(load_start, 2), round(os.getloadavg()[0], 2)]
        result["window_s"] = round(wall, 1)
        result["supervisor_rss_mib"] = round(sup.memory_info().rss / 2**20, 1)
        result["samples_in_window"] = len(sample_lat)

        # CLI round trip
        load_start = os.getloadavg()[0]
        times = []
        for _ in range(args.ps_runs):
            start = time.perf_counter()
            done = vtui("ps", env=env)
            times.append(time.perf_counter() - start)
            assert done.returncode == 0, done.stderr
        result["ps_round_trip_ms"] = {
            "p50": round(1000 * statistics.median(times), 1),
            "p95": round(1000 * pct(times, 0.95), 1),
            "min": round(1000 * min(times), 1),
        }
        result["load_average_1m_ps"] = [round(load_start, 2), round(os.getloadavg()[0], 2)]

        # event -> client latency over restarts
        names = [f"i{i}" for i in range(args.instances)]
        for _ in range(args.restarts):
            for name in names:
                client.post("/restart", {"name": name}, timeout=None)
            client.post("/wait", {"names": names, "timeout": 60}, timeout=None)
        time.sleep(1.0)
        result["event_to_client_ms"] = {
            "state_events": len(state_lat),
            "p50": round(1000 * statistics.median(state_lat), 2),
            "p95": round(1000 * pct(state_lat, 0.95), 2),
            "max": round(1000 * max(state_lat), 2),
        }
        if sample_lat:
            result["sample_to_client_ms"] = {
                "samples": len(sample_lat),
                "p50": round(1000 * statistics.median(sample_lat), 2),
                "p95": round(1000 * pct(sample_lat, 0.95), 2),
            }
        result["load_average_1m"] = round(os.getloadavg()[0], 2)
    finally:
        vtui("down", str(path), env=env)
        try:
            ServiceClient(session).post("/shutdown", {})
        except (ServiceUnavailable, ServiceError, OSError):  # gone already, or refusing: `down` stopped it
            pass
    print(json.dumps(result, indent=2))
    if args.out:
        stored: dict[str, object] = result
        if args.label:
            try:
                stored = json.loads(args.out.read_text())
            except (OSError, ValueError):
                stored = {}
            if "supervisor_cpu_pct_one_core" in stored:  # an unlabelled result: keep it under "earlier"
                stored = {"earlier": stored}
            stored[args.label] = result
        args.out.write_text(json.dumps(stored, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
