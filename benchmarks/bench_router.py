"""Benchmark: replicas behind vllm-router (issue 17), on sim replicas started by `vtui up`.

1. Throughput: req/s and output tok/s of a fixed-concurrency load (vtui's own bench engine,
   `vtui.bench.run_bench`) sent (a) to one replica directly and (b) through the router to both.
2. A replica's death (SIGKILL of its API server), `--kills` times idle and `--kills` times busy (a
   closed loop of 4 request streams through the router), timed from the kill to:
   - the router no longer listing it (`/list_workers`, polled every 10 ms) and no longer calling it
     healthy (`/workers`): vtui's /remove_worker, the router's health check (1 s) or, busy, the router
     dropping a worker whose request failed, whichever comes first;
   - vtui's /remove_worker (its notice on the feed);
   - vtui showing it: the replica's first state change on the session supervisor's feed (what the
     dashboard draws from) and in `/status` (what `vtui ps` prints, polled every 20 ms);
   - the restarted replica back among the router's workers.
   Busy kills also count the requests that failed through the router meanwhile.

    python benchmarks/bench_router.py [--concurrency 32] [--duration 10] [--kills 5] [--out FILE]

State (run records, logs, the sim's GPU registry) goes to a temporary VTUI_STATE_DIR.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import _smoke
import httpx

ROOT = Path(__file__).resolve().parents[1]
MODEL = "Qwen/Qwen3-0.6B"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_run(count: int) -> int:
    for _ in range(100):
        base = free_port()
        ok = True
        for i in range(1, count):
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", base + i))
                except OSError:
                    ok = False
        if ok:
            return base
    raise SystemExit("no consecutive free ports")


def vtui(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args], capture_output=True, text=True, timeout=timeout, env=os.environ
    )


def layout_text(session: str, port: int, router_port: int, max_num_seqs: int) -> str:
    return f"""[session]
name = "{session}"

[[instance]]
name = "chat"
engine = "sim"
model = "{MODEL}"
port = {port}
replicas = 2
router_port = {router_port}
restart = "on-failure"
max_restarts = 100
backoff = 0.2

[instance.flags]
max-model-len = 4096
max-num-seqs = {max_num_seqs}
sim-startup-scale = 0.0
"""


def load(base_url: str, concurrency: int, duration: float) -> dict:
    from vtui.bench.engine import run_bench
    from vtui.bench.types import BenchConfig

    config = BenchConfig(
        base_url=base_url,
        model=MODEL,
        concurrency=concurrency,
        duration_s=duration,
        input_len=64,
        output_len=32,
        scrape_metrics=False,
        warmup_requests=concurrency,
    )
    step = asyncio.run(run_bench(config)).steps[0]
    return {
        "req_per_s": round(step.req_per_s, 2),
        "output_tok_per_s": round(step.output_tok_per_s, 1),
        "completed": step.completed,
        "failed": step.failed,
        "duration_s": round(step.duration_s, 2),
    }


def listed(router: str) -> set[str] | None:
    try:
        return set(httpx.get(f"{router}/list_workers", timeout=1, trust_env=False).json()["urls"])
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def healthy_in_router(router: str, url: str) -> bool:
    try:
        workers = httpx.get(f"{router}/workers", timeout=1, trust_env=False).json()["workers"]
    except (httpx.HTTPError, ValueError, KeyError):
        return True
    return any(w.get("url") == url and w.get("is_healthy") for w in workers)


def one_kill(client, router: str, name: str, url: str, busy: bool) -> dict:
    """Kill replica `name` once (with a closed loop of 4 request streams through the router when
    `busy`); the times (s) from the kill to each sign of it."""
    from vtui.service.client import ServiceError, ServiceUnavailable

    pid = next(i["pid"] for i in client.get("/status")["instances"] if i["name"] == name)
    seen: dict[str, float] = {}
    feed_ready = threading.Event()
    stop = threading.Event()

    def mark(key: str) -> None:
        seen.setdefault(key, time.monotonic())

    def read_feed() -> None:
        for message in client.feed(timeout=30):
            if message.get("type") == "hello":
                feed_ready.set()
            event = message.get("event") or {}
            if event.get("kind") == "state" and event.get("instance") == name and event.get("new") != "ready":
                mark("feed")
            if event.get("kind") == "notice" and f"-{name}" in event.get("text", "").split(" → ")[0]:
                mark("vtui_remove")  # RouterHub's "NAME-router: workers -NAME → …"
            if stop.is_set():
                return

    def poll_status() -> None:
        while not stop.is_set() and "status" not in seen:
            try:
                states = {i["name"]: i["state"] for i in client.get("/status")["instances"]}
            except (ServiceUnavailable, ServiceError, OSError):  # between two supervisors: ask again
                states = {}
            if t0_set.is_set() and states.get(name) not in (None, "ready"):
                mark("status")
            time.sleep(0.02)

    failures = [0, 0]  # failed, sent

    def traffic() -> None:
        body = {"model": MODEL, "prompt": "hello", "max_tokens": 8}
        with httpx.Client(timeout=30, trust_env=False) as http:
            while not stop.is_set():
                failures[1] += 1
                try:
                    if http.post(f"{router}/v1/completions", json=body).status_code != 200:
                        failures[0] += 1
                except httpx.HTTPError:
                    failures[0] += 1

    t0_set = threading.Event()
    threads = [
        threading.Thread(target=read_feed, daemon=True),
        threading.Thread(target=poll_status, daemon=True),
    ]
    threads[0].start()
    feed_ready.wait(10)
    loaders = [threading.Thread(target=traffic, daemon=True) for _ in range(4 if busy else 0)]
    for t in loaders:
        t.start()
    time.sleep(1.0)
    before = listed(router)
    if before is None or url not in before:
        raise SystemExit(f"{url} is not a worker of {router} before the kill: {before}")
    failures[:] = [0, 0]
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    t0_set.set()
    threads[1].start()

    def poll(key: str, gone: Callable[[], bool]) -> None:  # one endpoint per thread: no poll waits on another
        while time.monotonic() - t0 < 15 and key not in seen:
            if gone():
                mark(key)
            time.sleep(0.01)

    pollers = [
        threading.Thread(target=poll, args=("unlisted", lambda: url not in (listed(router) or {url}))),
        threading.Thread(target=poll, args=("unhealthy", lambda: not healthy_in_router(router, url))),
    ]
    for t in pollers:
        t.start()
    for t in pollers:
        t.join()
    back = None
    while time.monotonic() - t0 < 60:  # back in: READY again and listed by the router
        workers = listed(router)
        if workers is not None and url in workers:
            back = time.monotonic() - t0
            break
        time.sleep(0.02)
    stop.set()
    for t in loaders:
        t.join(35)

    def since(key: str) -> float | None:
        return round(seen[key] - t0, 3) if key in seen else None

    return {
        "busy": busy,
        "router_unlisted_s": since("unlisted"),
        "router_not_healthy_s": since("unhealthy"),
        "vtui_remove_worker_s": since("vtui_remove"),
        "vtui_feed_s": since("feed"),
        "vtui_status_s": since("status"),
        "back_in_router_s": round(back, 3) if back is not None else None,
        "requests_during": failures[1],
        "failed_during": failures[0],
    }


KEYS = (
    "router_unlisted_s",
    "router_not_healthy_s",
    "vtui_remove_worker_s",
    "vtui_feed_s",
    "vtui_status_s",
    "back_in_router_s",
)


async def screenshot(layout: Path, router: str, out: Path, seconds: float = 8.0) -> None:
    """The dashboard (headless, 230×20) on this session while 8 streams go through the router, saved
    as SVG: the replicas' rows and the router's group row."""
    from vtui.ui.app import make_app

    stop = threading.Event()

    def traffic() -> None:
        body = {"model": MODEL, "prompt": "hello", "max_tokens": 256}
        with httpx.Client(timeout=30, trust_env=False) as http:
            while not stop.is_set():
                http.post(f"{router}/v1/completions", json=body)

    loaders = [threading.Thread(target=traffic, daemon=True) for _ in range(8)]
    for t in loaders:
        t.start()
    app = make_app(layout, gpu_sampler=False)
    try:
        async with app.run_test(size=(230, 20)) as pilot:
            await pilot.pause(seconds)
            out.parent.mkdir(parents=True, exist_ok=True)
            app.save_screenshot(filename=out.name, path=str(out.parent))
    finally:
        stop.set()


def summary(values: list[float | None]) -> dict:
    known = [v for v in values if v is not None]
    if not known:
        return {"n": 0}
    return {
        "n": len(known),
        "median": round(statistics.median(known), 3),
        "max": round(max(known), 3),
        "min": round(min(known), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--kills", type=int, default=5, help="kills idle, and as many busy")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_router.json")
    parser.add_argument("--screenshot", type=Path, help="also save the dashboard under load as this SVG")
    # a smoke run: one kill of each kind, and the recorded results left as they are (no --out)
    _smoke.tiny(parser, concurrency=2, duration=0.5, kills=1, out=None)
    args = parser.parse_args()

    state = tempfile.mkdtemp(prefix="vtui-bench-router-")
    os.environ.update(VTUI_STATE_DIR=state, VTUI_SUPERVISOR_GPU="0", PYTHONPATH=str(ROOT))
    sys.path.insert(0, str(ROOT))
    from vtui.service.client import ServiceClient

    session = f"br{uuid.uuid4().hex[:6]}"
    port, router_port = free_run(2), free_port()
    path = Path(state) / "layout.toml"
    path.write_text(layout_text(session, port, router_port, args.max_num_seqs))
    up = vtui("up", str(path))
    if up.returncode != 0:
        print(up.stdout, up.stderr, file=sys.stderr)
        return 1
    router = f"http://127.0.0.1:{router_port}"
    urls = {f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"}
    try:
        end = time.monotonic() + 20
        while listed(router) != urls and time.monotonic() < end:
            time.sleep(0.1)
        direct = load(f"http://127.0.0.1:{port}", args.concurrency, args.duration)
        routed = load(router, args.concurrency, args.duration)
        if args.screenshot:
            asyncio.run(screenshot(path, router, args.screenshot))
        client = ServiceClient(session)
        kills = [
            one_kill(client, router, "chat-0", f"http://127.0.0.1:{port}", busy=bool(i % 2))
            for i in range(args.kills * 2)
        ]
    finally:
        vtui("down", str(path))
    result = {
        "benchmark": "bench_router",
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load1": os.getloadavg()[0]},
        "setup": {
            "engine": "sim",
            "model": MODEL,
            "replicas": 2,
            "router": "vllm-router 0.1.17 (round_robin, health check every 1 s, 2 failures)",
            "max_num_seqs": args.max_num_seqs,
            "concurrency": args.concurrency,
            "duration_s": args.duration,
            "input_len": 64,
            "output_len": 32,
        },
        "one_replica_direct": direct,
        "router_two_replicas": routed,
        "speedup_req_per_s": round(routed["req_per_s"] / direct["req_per_s"], 2)
        if direct["req_per_s"]
        else None,
        "kills": kills,
        "death_summary": {
            mode: {key: summary([k[key] for k in kills if k["busy"] == (mode == "busy")]) for key in KEYS}
            for mode in ("idle", "busy")
        },
        "failed_during_kills": sum(k["failed_during"] for k in kills),
        "requests_during_kills": sum(k["requests_during"] for k in kills),
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
