"""What the UI thread spends on the log view following N lines/s, in CPU time (not wall time, which a
loaded machine inflates several times over): per frame (Textual's screen update: compositing, the rows
drawn), per key (`P`: the probes shown / hidden, the view refiltered), per batch of lines reaching the
app, and per GC pause. The app runs headless (no terminal, no tmux) on bench_logs.py's feeder; the heap
is frozen as on a real terminal. A companion to bench_logs.py, whose key-to-screen figure is what a user
sees; this one says where the UI thread's time goes.

    python benchmarks/bench_logs_frames.py --rate 5000 --presses 20
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _smoke

SETTLE_S = 0.5 if _smoke.on() else 2.0  # before the log view, and in it before the clock starts


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    v = sorted(values)
    return {
        "n": len(v),
        "p50": round(statistics.median(v), 2),
        "p95": round(v[int(0.95 * (len(v) - 1))], 2),
        "max": round(v[-1], 2),
    }


def measure(rate: int, presses: int) -> dict:
    from bench_logs import feeding_supervisor
    from textual.screen import Screen

    from vtui.ui import startup
    from vtui.ui.app import VtuiApp, make_app
    from vtui.ui.screens.logs import LogScreen

    recording = [False]
    sinks: dict[str, list[float]] = {"frame": [], "key": [], "batch": [], "gc": []}

    def timed(owner: type, name: str, sink: list[float]) -> None:
        inner: Callable = getattr(owner, name)

        def wrapped(*args: object, **kwargs: object) -> object:
            t = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                if recording[0]:
                    sink.append((time.thread_time() - t) * 1000)

        setattr(owner, name, wrapped)

    timed(Screen, "_on_timer_update", sinks["frame"])
    timed(LogScreen, "action_toggle_probes", sinks["key"])
    timed(VtuiApp, "on_telemetry_batch", sinks["batch"])
    gc_start = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_start[0] = time.thread_time()
        elif recording[0]:
            sinks["gc"].append((time.thread_time() - gc_start[0]) * 1000)

    gc.callbacks.append(on_gc)
    out: dict = {}

    async def run() -> None:
        app = make_app(supervisor=feeding_supervisor(rate), gpu_sampler=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(SETTLE_S)
            startup.freeze_heap()  # what the app does on a real terminal after its first frame
            await pilot.press("l")
            await pilot.pause(SETTLE_S)
            recording[0] = True
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(presses):
                await pilot.press("P")
                await pilot.pause(0.5)
            out["cpu_percent_of_one_core"] = round(
                100 * (time.process_time() - cpu0) / (time.perf_counter() - wall0), 1
            )
            recording[0] = False

    try:
        asyncio.run(run())
    except Exception as exc:
        if "cpu_percent_of_one_core" not in out:
            raise
        out["teardown_error"] = repr(exc)[:200]
    return {
        "rate_lines_per_s": rate,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        **out,
        **{f"{k}_cpu_ms": _stats(v) for k, v in sinks.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--presses", type=int, default=20)
    _smoke.tiny(parser, rate=100, presses=1)
    args = parser.parse_args()
    print(json.dumps(measure(args.rate, args.presses), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
