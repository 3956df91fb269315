"""Where vtui's main-thread CPU goes while the dashboard shows N instances at 1 Hz: bench_ui's child
(the same synthetic load) with a few Textual and vtui methods wrapped to add up their CPU time
(`time.thread_time`, so other processes on the machine do not count). Run it inside a terminal:

    tmux new-session -d -x 120 -y 40 "python benchmarks/bench_ui_breakdown.py --out /tmp/ui.json"

With `--layout L.toml`, the dashboard is a client of L's running session supervisor (`vtui up L`
first), as `vtui L --no-start` runs it: the feed's decoding is measured too.

Nested entries are included in their callers (card_render_line is part of compositor_refresh). The
wrappers add their own cost: compare shares, not the total with bench_ui's figure."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import _smoke
import bench_ui
import h11
import psutil
from textual._compositor import Compositor
from textual._styles_cache import StylesCache
from textual.app import App
from textual.message_pump import MessagePump
from textual.screen import Screen

from vtui.service.remote import RemoteSupervisor
from vtui.ui.app import VtuiApp, run_tui
from vtui.ui.stack import Screens
from vtui.ui.widgets.gpu_panel import GpuPanel
from vtui.ui.widgets.instance_pane import InstancePane
from vtui.ui.widgets.instance_table import FleetTable
from vtui.ui.widgets.titlebar import TitleBar

WARMUP_S = 1.0 if _smoke.on() else 5.0
totals: dict[str, float] = {}
calls: dict[str, int] = {}
armed = threading.Event()


def _add(label: str, spent: float) -> None:
    if armed.is_set():
        totals[label] = totals.get(label, 0.0) + spent
        calls[label] = calls.get(label, 0) + 1


def watch_gc() -> None:
    """The cyclic collector's pauses, by generation (they land inside whatever function allocates)."""
    import gc

    started = [0.0]

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        else:
            _add(
                f"gc generation {info['generation']} (inside the entries above)",
                time.thread_time() - started[0],
            )

    gc.callbacks.append(callback)


def wrap(cls: type, name: str, label: str) -> None:
    original = getattr(cls, name)

    @functools.wraps(original)
    def timed(*args, **kwargs):
        start = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            _add(label, time.thread_time() - start)

    setattr(cls, name, timed)


def wrap_dispatch() -> None:
    """Messages by type (outermost dispatch only)."""
    original = MessagePump._dispatch_message
    depth = [0]

    async def timed(self, message):
        depth[0] += 1
        start = time.thread_time()
        try:
            return await original(self, message)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                _add(f"message {type(message).__name__} -> {type(self).__name__}", time.thread_time() - start)

    MessagePump._dispatch_message = timed  # type: ignore[method-assign]


def wrap_render_widget() -> None:
    """The styles cache's renders by widget class (which widgets a refresh re-renders, and their cost)."""
    original = StylesCache.render_widget

    def timed(self, widget, crop):
        start = time.thread_time()
        try:
            return original(self, widget, crop)
        finally:
            _add(f"      render_widget {type(widget).__name__}", time.thread_time() - start)

    StylesCache.render_widget = timed  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--up-for", type=float, default=600.0)
    parser.add_argument("--layout", help="a layout whose session supervisor runs (vtui up): its client")
    parser.add_argument("--out", required=not _smoke.on(), help="the figures' JSON file")
    _smoke.tiny(parser, instances=1, seconds=0.5, up_for=0.0)
    args = parser.parse_args()
    if args.out is None:  # a smoke run: the figures go to a scratch file
        args.out = str(Path(tempfile.mkdtemp(prefix="vtui-bench-breakdown-")) / "ui.json")
    for cls, name, label in [
        (Screen, "_compositor_refresh", "compositor_refresh (Textual: render + write the changed lines)"),
        (Compositor, "_render_chops", "  compositor _render_chops"),
        (StylesCache, "render_widget", "    styles cache render_widget (per widget)"),
        (StylesCache, "render_line", "      styles cache render_line (per line)"),
        (FleetTable, "_draw_line", "        vtui fleet line -> strip"),
        (App, "_display", "  terminal write (_display)"),
        (Screens, "refresh", "refresh_screens (vtui: the 1 Hz tick)"),
        (FleetTable, "update_from", "  vtui fleet update_from (rows + compare)"),
        (GpuPanel, "_rerender", "  vtui GPU panel text"),
        (InstancePane, "update_view", "  vtui instance pane update_view"),
        (TitleBar, "refresh_from", "  vtui title bar"),
        (RemoteSupervisor, "_on_message", "feed: decode a message + hand it over (RemoteSupervisor)"),
        (RemoteSupervisor, "_apply_statuses", "  feed: status snapshot"),
        (json, "loads", "feed: json.loads"),
        (h11.Connection, "next_event", "feed: h11 next_event"),
        (VtuiApp, "on_telemetry_batch", "message TelemetryBatch (store.add_sample, logs)"),
    ]:
        wrap(cls, name, label)
    wrap_dispatch()
    wrap_render_widget()
    watch_gc()

    def measure() -> None:
        time.sleep(WARMUP_S)
        proc = psutil.Process()
        main_thread = next(t for t in proc.threads() if t.id == proc.pid)
        before = main_thread.user_time + main_thread.system_time
        process_before = sum(proc.cpu_times()[:2])
        armed.set()
        time.sleep(args.seconds)
        armed.clear()
        main_thread = next(t for t in proc.threads() if t.id == proc.pid)
        result = {
            "layout": args.layout,
            "load_average_1m": round(os.getloadavg()[0], 2),
            "instances": args.instances,
            "up_for_s": args.up_for,
            "seconds": args.seconds,
            "process_ms_per_s": round((sum(proc.cpu_times()[:2]) - process_before) / args.seconds * 1000, 2),
            "main_thread_ms_per_s": round(
                (main_thread.user_time + main_thread.system_time - before) / args.seconds * 1000, 2
            ),
            "ms_per_s": {
                k: round(v / args.seconds * 1000, 2) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])
            },
            "calls_per_s": {
                k: round(calls[k] / args.seconds, 1) for k in sorted(totals, key=lambda k: -totals[k])
            },
        }
        Path(args.out).write_text(json.dumps(result, indent=1))

    threading.Thread(target=measure, daemon=True).start()
    pidfile = Path(tempfile.mkdtemp()) / "pid"
    # the end: success once the figures are written (the measuring thread's failure is the run's)
    threading.Timer(
        WARMUP_S + args.seconds + 1, lambda: os._exit(0 if Path(args.out).exists() else 1)
    ).start()
    if args.layout:
        return run_tui([args.layout, "--no-start"])
    return bench_ui.child(args.instances, str(pidfile), up_for=args.up_for)


if __name__ == "__main__":
    raise SystemExit(main())
