"""Where the session supervisor's CPU goes, in bench_service.py's setting (N sim instances, /metrics and
/health at 1 Hz, one feed client): the supervisor is started first by this script's `--child` mode (`vtui up` then finds it), which
turns cProfile on at SIGUSR1 and writes the profile at SIGUSR2: only the steady window is profiled (no
start-up, no launches). The top functions are printed.

    python benchmarks/profile_service.py [--instances 8] [--window 30] [--sort tottime] [--out FILE.prof]

`--by-callback` instead: no profiler, the event loop's main-thread CPU time (`time.thread_time`) per
callback it runs (a task's steps under its coroutine's name, a socket's reads under its protocol's), the
epoll wait, and the rest of the loop's own work: where a wake-up's cost goes, at ~1 µs of overhead each.
`--function MODULE:QUALNAME` (repeatable) times those synchronous functions too (inclusive, "fn").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _smoke

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import ROOT, layout_text, vtui


def _label(handle: asyncio.Handle) -> str:
    callback = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return "task " + getattr(coro, "__qualname__", type(coro).__name__)
    protocol = getattr(owner, "_protocol", None)
    if protocol is not None:
        return f"{getattr(callback, '__name__', '?')} {type(protocol).__qualname__}"
    return getattr(callback, "__qualname__", repr(callback))


def by_callback(out: Path) -> tuple[Callable[..., None], Callable[..., None]]:
    """(start, stop) signal handlers: CPU per event-loop callback, written to `out` as JSON at stop."""
    import json
    from collections import defaultdict

    spent: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    original_run = asyncio.Handle._run
    original_once = asyncio.BaseEventLoop._run_once  # type: ignore[attr-defined]
    clock = time.thread_time
    started = [0.0, 0.0, 0.0]

    def run(self: asyncio.Handle) -> None:
        t0 = clock()
        try:
            original_run(self)
        finally:
            entry = spent[_label(self)]
            entry[0] += clock() - t0
            entry[1] += 1

    def once(self: asyncio.BaseEventLoop) -> None:
        t0 = clock()
        selector = self._selector  # type: ignore[attr-defined]
        select = selector.select

        def timed(timeout: float | None = None) -> Any:
            s0 = clock()
            try:
                return select(timeout)
            finally:
                entry = spent["(epoll wait, kernel)"]
                entry[0] += clock() - s0
                entry[1] += 1

        selector.select = timed
        try:
            original_once(self)
        finally:
            del selector.select
            entry = spent["(loop, all of it)"]
            entry[0] += clock() - t0
            entry[1] += 1

    def timed_function(owner: Any, attr: str, label: str) -> None:
        original = getattr(owner, attr)

        def timed(*a: Any, **kw: Any) -> Any:
            t0 = clock()
            try:
                return original(*a, **kw)
            finally:
                entry = spent[label]
                entry[0] += clock() - t0
                entry[1] += 1

        setattr(owner, attr, timed)

    import importlib

    for name in filter(None, os.environ.get("VTUI_PROFILE_FUNCTIONS", "").split(",")):
        module, _, qual = name.partition(":")
        *path, attr = qual.split(".")
        owner: Any = importlib.import_module(module)
        for part in path:
            owner = getattr(owner, part)
        timed_function(owner, attr, f"  fn {qual}")

    import gc

    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:  # the collector's own time (inside a callback's)
        if phase == "start":
            gc_started[0] = clock()
        else:
            entry = spent[f"  (gc generation {info['generation']})"]
            entry[0] += clock() - gc_started[0]
            entry[1] += 1

    def start(*_: object) -> None:
        spent.clear()  # the functions' timers ran since start-up
        started[:] = [time.monotonic(), clock(), time.process_time()]
        gc.callbacks.append(on_gc)
        asyncio.Handle._run = run  # type: ignore[method-assign]
        asyncio.BaseEventLoop._run_once = once  # type: ignore[attr-defined]

    def stop(*_: object) -> None:
        gc.callbacks.remove(on_gc)
        asyncio.Handle._run = original_run  # type: ignore[method-assign]
        asyncio.BaseEventLoop._run_once = original_once  # type: ignore[attr-defined]
        wall = time.monotonic() - started[0]
        report = {
            "wall_s": wall,
            "main_thread_cpu_s": clock() - started[1],
            "process_cpu_s": time.process_time() - started[2],
            "callbacks": {k: v for k, v in sorted(spent.items(), key=lambda kv: -kv[1][0])},
        }
        out.write_text(json.dumps(report, indent=1))

    return start, stop


def child(prof: Path, layout: str, callbacks: bool = False) -> int:
    """The supervisor (`python -m vtui.service --layout LAYOUT`), profiled between SIGUSR1 and SIGUSR2."""
    import cProfile

    from vtui.service.__main__ import main as service_main

    if callbacks:
        start, stop = by_callback(prof)
        signal.signal(signal.SIGUSR1, start)
        signal.signal(signal.SIGUSR2, stop)
        return service_main(["--layout", layout])

    profiler = cProfile.Profile(
        time.thread_time
    )  # CPU time: a send that lets the reader run first is not ours
    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())

    def dump(*_: object) -> None:
        profiler.disable()
        profiler.dump_stats(str(prof))

    signal.signal(signal.SIGUSR2, dump)
    return service_main(["--layout", layout])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--scrape-s", type=float, default=1.0)
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None, help="keep the raw profile here")
    parser.add_argument(
        "--py-spy",
        default=None,
        metavar="BIN",
        help="sample the window with this py-spy binary instead of cProfile (no profiler overhead in it)",
    )
    parser.add_argument(
        "--by-callback", action="store_true", help="CPU per event-loop callback instead of cProfile"
    )
    parser.add_argument("--function", action="append", default=[], help="with --by-callback: also time it")
    parser.add_argument("--child", nargs=2, metavar=("PROF", "LAYOUT"), help=argparse.SUPPRESS)
    _smoke.tiny(parser, instances=1, window=0.5, top=5)
    args = parser.parse_args()
    if args.child:
        return child(Path(args.child[0]), args.child[1], args.by_callback)

    tmp = Path(tempfile.mkdtemp(prefix="vtui-profile-service-"))
    session = f"prof{uuid.uuid4().hex[:6]}"
    env = os.environ | {
        "VTUI_STATE_DIR": str(tmp / "state"),
        "PYTHONPATH": str(ROOT),
        "VTUI_SUPERVISOR_GPU": "0",
        "VTUI_SUPERVISOR_SCRAPE_S": str(args.scrape_s),
        "VTUI_PROFILE_FUNCTIONS": ",".join(args.function),
    }
    os.environ.update(env)
    path = tmp / "layout.toml"
    path.write_text(layout_text(session, args.instances))
    prof = args.out or tmp / "supervisor.prof"
    from vtui.service import locations
    from vtui.service.client import ServiceClient, ServiceError, ServiceUnavailable

    (tmp / "state").mkdir(parents=True, exist_ok=True)
    log = open(locations.log_path(session), "ab")  # the supervisor's stdio, as ensure_supervisor's
    sup = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--child",
            str(prof),
            str(path),
            *(["--by-callback"] if args.by_callback else []),
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        env=env,
    )
    client = ServiceClient(session)
    try:
        deadline = time.monotonic() + 30
        while not client.alive():
            if time.monotonic() > deadline or sup.poll() is not None:
                print("the supervisor did not come up; see", locations.log_path(session), file=sys.stderr)
                return 1
            time.sleep(0.05)
        up = vtui("up", str(path), env=env)
        if up.returncode != 0:
            print(up.stdout, up.stderr, file=sys.stderr)
            return 1
        threading.Thread(target=lambda: [None for _ in client.feed()], daemon=True).start()
        deadline = time.monotonic() + 120  # the window is the steady state: every instance up
        while time.monotonic() < deadline:
            states = [i["state"] for i in client.get("/status")["instances"]]
            if all(state == "ready" for state in states):
                break
            time.sleep(0.2)
        time.sleep(0.5 if _smoke.on() else 3.0)
        load0 = os.getloadavg()[0]
        if args.py_spy:
            raw = tmp / "py-spy.txt"
            spy = [args.py_spy, "record", "-p", str(sup.pid), "-d", str(int(args.window)), "-r", "500"]
            spy.append("--nonblocking")  # reads the memory without stopping it (no ptrace needed)
            subprocess.run([*spy, "-f", "raw", "-o", str(raw)], capture_output=True, timeout=args.window + 60)
        else:
            sup.send_signal(signal.SIGUSR1)
            time.sleep(args.window)
            sup.send_signal(signal.SIGUSR2)
            time.sleep(1.0)
        print(f"load average (1 min): {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end", file=sys.stderr)
        changes = [e for e in client.get("/events?n=100000").get("events", []) if e.get("kind") == "state"]
        print(f"state changes: {len(changes)}; the last: {changes[-3:]}", file=sys.stderr)
    finally:
        vtui("down", str(path), env=env)
        try:
            client.post("/shutdown", {})
        except (ServiceUnavailable, ServiceError, OSError):  # gone already, or refusing: `down` stopped it
            pass
        sup.wait(60)
        log.close()
    if args.py_spy:
        summarize(raw, args.top)
        return 0
    if args.by_callback:
        show_callbacks(prof, args.top)
        return 0
    stats = pstats.Stats(str(prof))
    stats.sort_stats(args.sort).print_stats(args.top)
    return 0


def show_callbacks(path: Path, top: int) -> None:
    import json

    report = json.loads(path.read_text())
    wall = report["wall_s"]
    print(
        f"window {wall:.1f} s: process CPU {100 * report['process_cpu_s'] / wall:.3f} % of a core, "
        f"main thread {100 * report['main_thread_cpu_s'] / wall:.3f} %"
    )
    print("   µs/s   calls/s  µs/call  callback")
    for label, (cpu, calls) in list(report["callbacks"].items())[:top]:
        print(f"{1e6 * cpu / wall:7.0f} {calls / wall:9.1f} {1e6 * cpu / max(1, calls):8.1f}  {label}")


def summarize(raw: Path, top: int) -> None:
    """py-spy's raw stacks of the main thread (the event loop): samples per frame, inclusive and own."""
    from collections import Counter

    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        if "_bootstrap" in frames[0]:  # worker threads (asyncio.to_thread's pool), mostly waiting
            continue
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    print(f"{total} main-thread samples at 500 Hz")
    for title, counter in (("inclusive", inclusive), ("own", own)):
        print(f"-- {title}")
        for frame, count in counter.most_common(top):
            print(f"{count:6d} {100 * count / max(1, total):5.1f}%  {frame}")


if __name__ == "__main__":
    raise SystemExit(main())
