"""How long each vtui screen takes to open: key press to the new screen drawn, per screen, on the real app
(`make_app` on the in-memory FakeSupervisor, Textual's Pilot, headless).

    python benchmarks/bench_screen_open.py [--opens 15] [--size 120x40] [--json OUT]

The session: three instances with an hour of samples each (one a second: the detail plots' `w` window),
a full log ring per instance (the store's LOG_LINES lines, a third of them vtui's own /metrics probes,
which the log view filters out), four GPUs. From the dashboard, each screen's key is pressed `--opens`
times (escape back to the dashboard between two): the detail screen (`enter`), logs (`l`), the flag
editor (`f`), presets (`p`), bench (`B`), tune (`T`), help (`?`), the restart confirmation (`r`), quit
(`q`), save-as (`S`) and open (`o`).

One opening: from the key sent to the app's first frame of the new screen (the app's own update timer
draws it; headless, the frame is composed and written nowhere). Two figures: the wall time, and the
process's CPU time in it (the shared dev machine's load moves the wall figure; the CPU figure is the
app's own work). The dashboard's sort key (`>`, a repaint of the fleet table) is measured the same way:
a key that opens nothing, the floor. The first opening of a screen is shown apart: it imports the
screen's module (vtui imports its screens' modules on first use) and builds what later ones may reuse.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _smoke

NOW = 1_700_000_000.0
GIB = 2**30

# (label, key, the screen's class name once it is open)
SCREENS = (
    ("sort (dashboard)", "greater_than_sign", "DashboardScreen"),
    ("detail", "enter", "DetailScreen"),
    ("logs", "l", "LogScreen"),
    ("flags", "f", "FlagEditorScreen"),
    ("presets", "p", "PresetScreen"),
    ("bench", "B", "BenchScreen"),
    ("tune", "T", "TuneScreen"),
    ("help", "question_mark", "HelpScreen"),
    ("restart confirm", "r", "ConfirmScreen"),
    ("quit", "q", "QuitScreen"),
    ("save as", "S", "PathScreen"),
    ("open layout", "o", "PathScreen"),
)


def log_ring(name: str, count: int) -> list[str]:
    """A vLLM-looking log: engine lines, access-log probes (a third), now and then a warning or error."""
    out = []
    for i in range(count):
        if i % 3 == 1:
            out.append(f'INFO:     127.0.0.1:{40000 + i % 20000} - "GET /metrics HTTP/1.1" 200 OK')
        elif i % 97 == 0:
            out.append(f"ERROR 12-01 13:{i // 60 % 60:02d}:{i % 60:02d} [serving.py:99] request {i} failed")
        elif i % 41 == 0:
            out.append(
                f"WARNING 12-01 13:{i // 60 % 60:02d}:{i % 60:02d} [scheduler.py:400] {name}: queue long"
            )
        else:
            out.append(
                f"INFO 12-01 13:{i // 60 % 60:02d}:{i % 60:02d} [loggers.py:123] Engine 000: Avg prompt "
                f"throughput: {1200 + i % 300}.0 tokens/s, Avg generation throughput: {300 + i % 90}.0 "
                f"tokens/s, Running: {i % 13} reqs, Waiting: {i % 4} reqs, GPU KV cache usage: {i % 100}.0%"
            )
    return out


def build(history_s: int, log_lines: int) -> tuple[Any, Any, Any]:
    from vtui.core.model import InstanceSpec, Layout, SessionSpec
    from vtui.telemetry.gpu import GpuInfo, GpuProcess, GpuSample
    from vtui.telemetry.metrics import MetricsSample, Percentiles
    from vtui.testing.fake_supervisor import FakeSupervisor
    from vtui.ui.app import make_app
    from vtui.ui.settings import UiSettings

    layout = Layout(
        SessionSpec("screens"),
        (
            InstanceSpec(
                "qwen",
                "Qwen/Qwen3-8B",
                8001,
                engine="sim",
                gpus=(0, 1),
                flags={"tensor-parallel-size": 2, "max-num-seqs": 256, "max-model-len": 8192},
            ),
            InstanceSpec("llama", "meta-llama/Llama-3.1-8B-Instruct", 8002, engine="sim", gpus=(2,)),
            InstanceSpec("embed", "BAAI/bge-m3", 8003, engine="sim", gpus=(3,)),
        ),
    )
    fake = FakeSupervisor(layout, clock=lambda: NOW - 3725)
    gpus = tuple(
        GpuInfo(i, "NVIDIA H200", int(80 * GIB), int(141 * GIB), 88.0, 61.0, 420.0, 700.0) for i in range(4)
    )
    procs = (
        GpuProcess(0, 40000, int(76 * GIB), "qwen"),
        GpuProcess(1, 40001, int(76 * GIB), "qwen"),
        GpuProcess(2, 40002, int(70 * GIB), "llama"),
        GpuProcess(3, 40003, int(40 * GIB), "embed"),
    )
    gpu = GpuSample(True, None, gpus, procs, NOW)

    class FixedGpu:
        def __call__(self, on_sample: Any, pid_owner: Any) -> FixedGpu:
            self.on_sample = on_sample
            return self

        def start(self) -> None:
            self.on_sample(gpu)

        def stop(self) -> None:
            pass

    def sample(name: str, at: float, i: int) -> MetricsSample:
        wave = math.sin(i / 17)
        return MetricsSample(
            instance=name,
            at=at,
            running=float(round(12 + 3 * wave)),
            waiting=float(i % 4),
            waiting_by_reason={},
            kv_usage=0.3 + 0.5 * (i % 600) / 600,
            kv_capacity_tokens=20480,
            block_size=16,
            prompt_tps=1200 + 200 * wave,
            generation_tps=300 + 60 * wave,
            ttft=Percentiles(0.12, 0.45 + 0.1 * wave, 0.9),
            itl=Percentiles(0.02, 0.04, 0.05),
            e2e=Percentiles(1.0, 2.0, 3.0),
            queue=Percentiles(0.01, 0.05, 0.1),
            preemptions_per_s=0.0,
            prefix_hit_rate=0.45,
            success_per_s=4.0,
            abort_per_s=0.0,
            error_per_s=0.0,
            prompt_tokens_total=1e6 + i,
            generation_tokens_total=5e5 + i,
            preemptions_total=0.0,
            prefix_cache_queries_total=100.0,
            prefix_cache_hits_total=45.0,
            counter_reset=False,
            vllm_names="v1",
        )

    samples = {
        spec.name: [sample(spec.name, NOW - history_s + i, i) for i in range(history_s)]
        for spec in layout.instances
    }
    logs = {spec.name: log_ring(spec.name, log_lines) for spec in layout.instances}
    app = make_app(supervisor=fake, gpu_sampler=FixedGpu(), clock=lambda: NOW, settings=UiSettings())
    return app, fake, (samples, logs)


async def settle(pilot: Any, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


class FrameSpy:
    """Records when the app first hands a frame of a given screen to its driver (App._display: headless,
    the frame is composed and then written nowhere). Private Textual API, wrapped here only: no public
    hook tells when a screen was drawn."""

    def __init__(self, app: Any) -> None:
        self.want: str | None = None
        self.at: tuple[float, float] | None = None
        original = app._display

        def spy(screen: Any, renderable: Any) -> None:
            original(screen, renderable)
            if self.want is not None and renderable is not None and type(screen).__name__ == self.want:
                self.at, self.want = (time.perf_counter(), time.process_time()), None

        app._display = spy

    def expect(self, screen: str) -> None:
        self.want, self.at = screen, None


async def measure(opens: int, size: tuple[int, int], history_s: int, log_lines: int) -> dict[str, Any]:
    from vtui.ui.messages import MetricsArrived

    app, fake, (samples, logs) = build(history_s, log_lines)
    results: dict[str, Any] = {}
    async with app.run_test(size=size) as pilot:
        spy = FrameSpy(app)
        await settle(pilot)
        for name, points in samples.items():
            for point in points:
                app.on_metrics_arrived(MetricsArrived(point))
            fake.emit_logs(name, logs[name])
        await settle(pilot, 6)
        from vtui.ui import startup

        startup.freeze_heap()  # what the app does on a real terminal once the history is in
        for label, key, screen in SCREENS:
            walls: list[float] = []
            cpus: list[float] = []
            for _ in range(opens):
                spy.expect(screen)
                wall0, cpu0 = time.perf_counter(), time.process_time()
                await pilot.press(key)
                while spy.at is None:  # the app draws on its own (its update timer); Pilot only waits
                    await asyncio.sleep(0.005)
                walls.append((spy.at[0] - wall0) * 1000)
                cpus.append((spy.at[1] - cpu0) * 1000)
                if screen != "DashboardScreen":
                    await pilot.press("escape")
                    while type(app.screen).__name__ != "DashboardScreen":
                        await pilot.pause()
                await settle(pilot, 2)
            results[label] = {
                "key": key,
                "first_wall_ms": round(walls[0], 1),
                "first_cpu_ms": round(cpus[0], 1),
                "wall_ms_median": round(statistics.median(walls), 1),
                "wall_ms_max": round(max(walls), 1),
                "cpu_ms_median": round(statistics.median(cpus), 1),
                "cpu_ms_max": round(max(cpus), 1),
                "opens": opens,
            }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--opens", type=int, default=15, help="openings per screen (default 15)")
    parser.add_argument("--size", default="120x40", help="terminal size, COLSxROWS (default 120x40)")
    parser.add_argument("--history", type=int, default=3600, help="seconds of samples per instance")
    parser.add_argument(
        "--log-lines", type=int, default=None, help="log lines per instance (default: the ring)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the figures there too")
    _smoke.tiny(parser, opens=1, history=30, log_lines=200)
    args = parser.parse_args()
    if args.opens < 1:
        parser.error("--opens must be at least 1")
    cols, rows = (int(v) for v in args.size.lower().split("x"))
    from vtui.ui.store import LOG_LINES

    log_lines = args.log_lines if args.log_lines is not None else LOG_LINES
    results = asyncio.run(measure(args.opens, (cols, rows), args.history, log_lines))
    print(
        f"screen opening, {args.opens} opens each, {cols}x{rows}, {log_lines} log lines, {args.history} s history"
    )
    print(
        f"{'screen':<16} {'key':<14} {'1st wall':>9} {'1st cpu':>8} {'wall p50':>9} {'wall max':>9} "
        f"{'cpu p50':>8} {'cpu max':>8}  (ms)"
    )
    for label, r in results.items():
        print(
            f"{label:<16} {r['key']:<14} {r['first_wall_ms']:>9.1f} {r['first_cpu_ms']:>8.1f} "
            f"{r['wall_ms_median']:>9.1f} {r['wall_ms_max']:>9.1f} {r['cpu_ms_median']:>8.1f} {r['cpu_ms_max']:>8.1f}"
        )
    doc = {
        "size": [cols, rows],
        "opens": args.opens,
        "log_lines": log_lines,
        "history_s": args.history,
        "python": sys.version.split()[0],
        "at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "screens": results,
    }
    if args.json is not None and not _smoke.on():
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
