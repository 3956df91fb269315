"""The session supervisor's CPU against the I/O floor, in the same run: N sim instances (8 and 32 by
default), no client attached, the supervisor as `vtui up` starts it (GPU sampler on: NVML, else the
sims' simulated GPUs). Beside it, for the same window, a plain loop in its own process does the I/O
every supervisor must do each second and nothing else: GET /health and GET /metrics of each instance
(one keep-alive connection per instance, http.client) and each instance process's memory (psutil).

Reported per N: both processes' CPU (user + system) over the window as % of one core, and their ratio
(target: the supervisor at most the floor at 8 instances).

    python benchmarks/bench_supervisor_cost.py [--instances 8 32] [--window 30] [--out FILE.json [--label L]]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import _smoke

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import ROOT, free_port, vtui


def layout_text(session: str, n: int) -> str:
    """N sims, each on its own simulated GPU of a box with max(8, N) of them."""
    parts = [f'[session]\nname = "{session}"\n']
    for i in range(n):
        parts.append(
            f"""
[[instance]]
name = "i{i}"
engine = "sim"
model = "Qwen/Qwen3-0.6B"
port = {free_port()}
gpus = [{i}]
restart = "never"
[instance.flags]
max-model-len = 4096
sim-startup-scale = 0.0
sim-num-gpus = {max(8, n)}
"""
        )
    return "".join(parts)


def floor_loop(targets: list[tuple[int, int]], seconds: float) -> None:
    """The floor: each second, /health and /metrics of every (port, pid) and the pid's memory."""
    import psutil

    conns = {port: http.client.HTTPConnection("127.0.0.1", port, timeout=2.0) for port, _ in targets}
    procs = {pid: psutil.Process(pid) for _, pid in targets}
    end = time.monotonic() + seconds
    tick = time.monotonic()
    while time.monotonic() < end:
        for port, pid in targets:
            conn = conns[port]
            for path in ("/health", "/metrics"):
                try:
                    conn.request("GET", path)
                    conn.getresponse().read()
                except (OSError, http.client.HTTPException):
                    conn.close()
            try:
                procs[pid].memory_info()
            except psutil.Error:
                pass
        tick += 1.0
        time.sleep(max(0.0, tick - time.monotonic()))


def measure(instances: int, window: float, gpu: bool = True) -> dict[str, object]:
    import psutil

    from vtui.service.client import ServiceClient

    tmp = Path(tempfile.mkdtemp(prefix="vtui-bench-cost-"))
    session = f"cost{uuid.uuid4().hex[:6]}"
    env = os.environ | {"VTUI_STATE_DIR": str(tmp / "state"), "PYTHONPATH": str(ROOT)}
    env.pop("VTUI_SUPERVISOR_GPU", None)  # the supervisor as users run it: its GPU sampler on
    if not gpu:
        env["VTUI_SUPERVISOR_GPU"] = "0"  # --no-gpu: the sampler's share, by difference
    os.environ.update(env)
    path = tmp / "layout.toml"
    path.write_text(layout_text(session, instances))
    try:
        up = vtui("up", str(path), env=env)
        if up.returncode != 0:
            raise RuntimeError(f"vtui up failed: {up.stdout[-2000:]}{up.stderr[-2000:]}")
        client = ServiceClient(session)
        status = client.get("/status")
        sup = psutil.Process(status["supervisor_pid"])
        targets = [(s["spec"]["port"], s["pid"]) for s in status["instances"] if s.get("pid")]
        time.sleep(1.0 if _smoke.on() else 5.0)  # scrapers armed, first samples in, start-up work done
        floor = subprocess.Popen(
            [sys.executable, __file__, "--floor", json.dumps(targets), "--window", str(window + 2.0)],
            env=env,
        )
        time.sleep(1.0)  # the floor's own start-up (Python, imports) stays out of the window
        floor_ps = psutil.Process(floor.pid)
        t0, s0, f0 = time.monotonic(), sup.cpu_times(), floor_ps.cpu_times()
        time.sleep(window)
        s1, f1 = sup.cpu_times(), floor_ps.cpu_times()
        wall = time.monotonic() - t0
        floor.wait(30)
        supervisor = 100.0 * ((s1.user - s0.user) + (s1.system - s0.system)) / wall
        plain = 100.0 * ((f1.user - f0.user) + (f1.system - f0.system)) / wall
        return {
            "instances": instances,
            "running": len(targets),
            "window_s": round(wall, 1),
            "supervisor_cpu_pct": round(supervisor, 3),
            "floor_cpu_pct": round(plain, 3),
            "ratio": round(supervisor / plain, 2) if plain > 0 else None,
            "gpu": client.get("/status").get("gpu_sampling"),
        }
    finally:
        vtui("down", str(path), env=env)
        try:
            ServiceClient(session).post("/shutdown", {})
        except Exception:  # noqa: BLE001 — gone already
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--window", type=float, default=30.0, help="seconds of steady-state CPU sampling")
    parser.add_argument(
        "--no-gpu", action="store_true", help="the GPU sampler off (its share, by difference)"
    )
    parser.add_argument("--floor", default=None, help=argparse.SUPPRESS)  # the floor loop's own process
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--label", default=None, help="with --out: store the figures under this key of FILE")
    _smoke.tiny(parser, instances=[1], window=1.0)
    args = parser.parse_args()
    if args.floor is not None:
        floor_loop([tuple(t) for t in json.loads(args.floor)], args.window)
        return 0
    results = [measure(n, args.window, gpu=not args.no_gpu) for n in args.instances]
    result = {"cores": os.cpu_count(), "runs": results}
    print(json.dumps(result, indent=2))
    if args.out:
        stored: dict[str, object] = {}
        if args.label:
            try:
                stored = json.loads(args.out.read_text())
            except (OSError, ValueError):
                stored = {}
            stored[args.label] = result
        else:
            stored = result
        args.out.write_text(json.dumps(stored, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
