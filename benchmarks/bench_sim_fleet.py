"""Benchmark: a fleet of sim instances under the Supervisor — do 16 fit on this machine? Starts N sims
(small model, startup scale 0) from a generated layout, measures the time from `start()` to all READY,
the memory of the fleet (RSS, and PSS, which splits shared pages fairly), its idle CPU, then stops
everything and checks that nothing is left.

    python benchmarks/bench_sim_fleet.py [--instances 16] [--gpus 8] [--sim-load 0] [--health-interval 1.0]

`--gpus 8` pins instance i to simulated GPU i % 8 (two per GPU at 0.45 utilization, started one after the
other as on a shared GPU); `--gpus 0` leaves them unpinned on GPU 0 at 0.9/N each, all started at once.
State (run records, logs, the sim's GPU registry) goes to a temporary VTUI_STATE_DIR.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

import _smoke
import psutil


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def layout_text(session: str, count: int, gpus: int, sim_load: int) -> str:
    per = 0.45 if gpus else round(0.9 / count, 3)
    lines = [f'[session]\nname = "{session}"\nallow_gpu_sharing = true\n']
    for i in range(count):
        lines.append(
            f'[[instance]]\nname = "sim{i:02d}"\nengine = "sim"\nmodel = "Qwen/Qwen3-0.6B"\n'
            f"port = {free_port()}\n"
            + (f"gpus = [{i % gpus}]\n" if gpus else "")
            + f"\n[instance.flags]\ngpu-memory-utilization = {per}\nmax-model-len = 4096\n"
            f"sim-startup-scale = 0.0\nsim-load = {sim_load}\ndisable-uvicorn-access-log = true\n"
        )
    return "\n".join(lines)


def memory(procs: list[psutil.Process]) -> dict[str, float]:
    rss = pss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
    return {"rss_mib": round(rss / 2**20, 1), "pss_mib": round(pss / 2**20, 1)}


def cpu_percent(procs: list[psutil.Process], seconds: float) -> float:
    for proc in procs:
        try:
            proc.cpu_percent(None)
        except psutil.Error:
            pass
    time.sleep(seconds)
    total = 0.0
    for proc in procs:
        try:
            total += proc.cpu_percent(None)
        except psutil.Error:
            pass
    return round(total, 1)


async def run(args: argparse.Namespace) -> dict[str, object]:
    from vtui.core.state import State
    from vtui.layouts import load_layout
    from vtui.supervisor.launcher import MARKER
    from vtui.supervisor.supervisor import Supervisor

    session = f"fleet{uuid.uuid4().hex[:6]}"
    folder = Path(os.environ["VTUI_STATE_DIR"])
    path = folder / "fleet.toml"
    path.write_text(layout_text(session, args.instances, args.gpus, args.sim_load))
    layout = load_layout(path)
    sup = Supervisor(layout, health_interval=args.health_interval)
    avail_before = psutil.virtual_memory().available
    lags: list[float] = []

    async def heartbeat() -> None:  # how long the event loop (the UI's, in the app) is held at a time
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.01)
            lags.append(time.monotonic() - t - 0.01)

    beat = asyncio.create_task(heartbeat())
    t0 = time.monotonic()
    try:
        await sup.start()
        spawned_s = time.monotonic() - t0
        states = await sup.wait_settled(timeout=args.timeout)
        ready_s = time.monotonic() - t0
        beat.cancel()
        bad = {n: s.value for n, s in states.items() if s is not State.READY}
        errors = {s.name: s.last_error for s in sup.status() if s.name in bad}
        leaders, pumps = [], []
        for status in sup.status():
            handle = sup.instances[status.name].handle
            if handle is None:
                continue
            tree = sup.launcher.tree(handle)
            leaders += [p for pid, p in tree.items() if pid != handle.pump_pid]
            pumps += [p for pid, p in tree.items() if pid == handle.pump_pid]
        await asyncio.sleep(1.0)  # let the servers settle after their first requests
        result: dict[str, object] = {
            "instances": args.instances,
            "ready": args.instances - len(bad),
            "not_ready": bad,
            "errors": errors,
            "gpus": args.gpus,
            "sim_load": args.sim_load,
            "health_interval_s": args.health_interval,
            "spawned_s": round(spawned_s, 2),
            "all_ready_s": round(ready_s, 2),
            "loop_max_lag_s": round(max(lags, default=0.0), 3),
            "loop_blocked_s": round(sum(lag for lag in lags if lag > 0.05), 2),
            "sims": {"processes": len(leaders), **memory(leaders)},
            "pumps": {"processes": len(pumps), **memory(pumps)},
            "per_sim_pss_mib": round(memory(leaders)["pss_mib"] / max(1, len(leaders)), 1),
            "available_mem_drop_mib": round((avail_before - psutil.virtual_memory().available) / 2**20, 1),
            "machine": {
                "cpus": psutil.cpu_count(),
                "mem_total_mib": round(psutil.virtual_memory().total / 2**20),
                "mem_available_mib": round(psutil.virtual_memory().available / 2**20),
            },
        }
        result["fleet_cpu_percent"] = await asyncio.to_thread(cpu_percent, leaders + pumps, args.cpu_seconds)
        supervisor_proc = psutil.Process()
        result["supervisor"] = {
            "rss_mib": round(supervisor_proc.memory_info().rss / 2**20, 1),
            "cpu_percent": await asyncio.to_thread(cpu_percent, [supervisor_proc], args.cpu_seconds),
        }
    finally:
        t1 = time.monotonic()
        await sup.close(stop_instances=True)
        stop_s = time.monotonic() - t1
    left = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(MARKER, "").startswith(
                session + "/"
            ):
                left.append(proc.pid)
        except psutil.Error:
            pass
    result["stop_all_s"] = round(stop_s, 2)
    result["left_after_stop"] = left
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPUs to spread over (0: unpinned)")
    parser.add_argument("--sim-load", type=int, default=0, help="background clients per instance")
    parser.add_argument("--health-interval", type=float, default=1.0, help="the supervisor's (1.0 = vtui's)")
    parser.add_argument("--cpu-seconds", type=float, default=3.0, help="window for the idle CPU figure")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    _smoke.tiny(parser, instances=1, gpus=1, cpu_seconds=0.2, timeout=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vtui-fleet-") as tmp:
        os.environ["VTUI_STATE_DIR"] = tmp
        os.environ.pop("VTUI_SIM_GPU_DIR", None)
        result = asyncio.run(run(args))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if not result["not_ready"] and not result["left_after_stop"] else 1


if __name__ == "__main__":
    sys.exit(main())
