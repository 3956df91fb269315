"""vtui's own cost: CPU and RSS while showing 8 and 32 instances refreshed at 1 Hz, key-press-to-screen
latency under that load (`>` sorts the fleet table, `<` undoes it: the header's NAME^ marker shows the
repaint), and time to first frame, measured on the real app in a real terminal (tmux). A child that
fails shows its screen and traceback in the error (remain-on-exit), not a bare tmux failure.

The instances are the in-memory FakeSupervisor with a feed, as the session supervisor's client has
one: a fresh MetricsSample per instance every second, handed to the dashboard as the feed hands them,
and a GPU sampler thread reports 8 GPUs at 1 Hz. The parent drives tmux and measures the child's process with psutil.

    python benchmarks/bench_ui.py            # both sizes, prints a table and JSON
    python benchmarks/bench_ui.py --child 8  # the app alone (what the parent runs in tmux)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

import _smoke

GIB = 2**30


# -- the child: the app under a synthetic 1 Hz load ---------------------------------------------------
def child(
    n: int, pidfile: str, profile: str | None = None, profile_s: float = 20.0, up_for: float = 0.0
) -> int:
    from vtui.core.model import InstanceSpec, Layout, SessionSpec
    from vtui.telemetry.gpu import GpuInfo, GpuProcess, GpuSample
    from vtui.telemetry.metrics import MetricsSample, Percentiles
    from vtui.testing.fake_supervisor import FakeSupervisor
    from vtui.ui.app import make_app

    Path(pidfile).write_text(str(os.getpid()))
    hooks: list = []
    specs = tuple(
        InstanceSpec(
            f"inst{i:02d}",
            "Qwen/Qwen3-8B",
            9000 + i,
            engine="sim",
            gpus=(i % 8,),
            flags={"max-num-seqs": 256, "max-model-len": 8192},
        )
        for i in range(n)
    )
    layout = Layout(SessionSpec(f"bench{n}"), specs)

    def _samples(name: str, count: int = 60) -> list:
        """`count` distinct samples (every value moves every second, the worst case for drawing)."""
        rng = random.Random(name)
        return [
            MetricsSample(
                instance=name,
                at=time.time(),
                running=float(rng.randint(0, 256)),
                waiting=float(rng.randint(0, 9)),
                waiting_by_reason={},
                kv_usage=rng.random(),
                kv_capacity_tokens=200_000,
                block_size=16,
                prompt_tps=rng.uniform(0, 5000),
                generation_tps=rng.uniform(0, 2000),
                ttft=Percentiles(0.1, 0.4, 0.9),
                itl=Percentiles(0.02, 0.04, 0.06),
                e2e=Percentiles(1, 2, 3),
                queue=Percentiles(0, 0.1, 0.2),
                preemptions_per_s=0.0,
                prefix_hit_rate=rng.random(),
                success_per_s=3.0,
                abort_per_s=0.0,
                error_per_s=0.0,
                prompt_tokens_total=None,
                generation_tokens_total=None,
                preemptions_total=None,
                prefix_cache_queries_total=None,
                prefix_cache_hits_total=None,
                counter_reset=False,
                vllm_names="v1",
            )
            for _ in range(count)
        ]

    class Feeding(FakeSupervisor):
        """The fake with a feed (`core.api.TelemetryFeed`), as the session supervisor's client is: a fresh
        MetricsSample per instance every second, handed over as the feed hands them (one batch)."""

        feeds_gpu = False  # the GPU sampler below runs in the dashboard
        facts: dict = {}

        def __init__(self, *args, **kw) -> None:
            super().__init__(*args, **kw)
            self.telemetry: list = []

        def subscribe_telemetry(self, callback):
            self.telemetry.append(callback)
            return lambda: self.telemetry.remove(callback)

        def subscribe_statuses(self, callback):
            return lambda: None

        async def run(self):
            while hooks:
                hooks.pop()()
            # made before the loop: the feeder's cost is not vtui's
            samples = {st.name: _samples(st.name) for st in self.status()}
            i = 0
            while True:
                for series in samples.values():
                    for callback in list(self.telemetry):
                        callback("sample", series[i % len(series)])
                i += 1
                await asyncio.sleep(1.0)

    class Gpus:
        def __init__(self, on_sample, pid_owner):
            self.on_sample, self.pid_owner, self.stop_event = on_sample, pid_owner, threading.Event()

        def start(self):
            threading.Thread(target=self._loop, daemon=True).start()

        def _loop(self):
            gpus = tuple(
                GpuInfo(i, "NVIDIA H200", 100 * GIB, 141 * GIB, 80.0, 60.0, 400.0, 700.0) for i in range(8)
            )
            while True:  # the first sample at once, as the real GpuSampler takes it
                owners = self.pid_owner()
                procs = tuple(
                    GpuProcess(i % 8, pid, 12 * GIB, name) for i, (pid, name) in enumerate(owners.items())
                )
                self.on_sample(GpuSample(True, None, gpus, procs, time.time()))
                if self.stop_event.wait(1.0):
                    return

        def stop(self):
            self.stop_event.set()

    # up_for: the instances started that long ago (an uptime under a minute is redrawn every second)
    app = make_app(
        supervisor=Feeding(layout, clock=lambda: time.time() - up_for),
        gpu_sampler=Gpus,
    )
    if profile:  # cProfile the steady state (after a 3 s warm-up), then exit
        import cProfile

        prof = cProfile.Profile()

        def arm() -> None:  # on the app's loop, once it runs
            loop = asyncio.get_running_loop()
            loop.call_later(3.0, prof.enable)
            loop.call_later(3.0 + profile_s, lambda: (prof.disable(), app.exit()))

        hooks.append(arm)
        app.run()
        prof.dump_stats(profile)
        return 0
    app.run()
    return 0


# -- the parent: tmux + psutil ---------------------------------------------------------------------
class Tmux:
    def __init__(self, cols: int, rows: int) -> None:
        self.sock, self.cols, self.rows = f"vtui-bench-{uuid.uuid4().hex[:6]}", cols, rows

    def __call__(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True)
        if done.returncode:  # say what tmux said (a bare CalledProcessError hid it)
            raise RuntimeError(f"tmux {' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def start(self, command: str, env: Mapping[str, str], keys: Iterable[str], remain: bool = True) -> None:
        """`command` in a detached session `b` of this size, with the `keys` of `env` in its environment
        (PYTHONPATH among them: the child imports the vtui under test, not an installed one);
        `remain`: a child that exits keeps its last screen (remain-on-exit), for `wait` to show."""
        pairs = [a for k in keys if k in env for a in ("-e", f"{k}={env[k]}")]
        size = ("-x", str(self.cols), "-y", str(self.rows))
        self("-f", "/dev/null", "new-session", "-d", "-s", "b", *size, *pairs, command)
        if remain:
            self("set-option", "-t", "b", "remain-on-exit", "on")

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "b")

    def wait(self, pred, timeout=60.0, poll=0.002, log: Path | None = None) -> float:
        start = time.perf_counter()
        text = ""
        while time.perf_counter() - start < timeout:
            text = self.screen()
            if pred(text):
                return time.perf_counter() - start
            if self("display-message", "-p", "-t", "b", "#{pane_dead}").strip() == "1":
                break  # the app exited (remain-on-exit keeps its last screen)
            time.sleep(poll)
        why = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
        raise RuntimeError(f"the app did not show what was expected; its screen:\n{text}\n{why}")


def measure(n: int, seconds: float, presses: int, up_for: float = 0.0) -> dict:
    import psutil

    tmp = Path(tempfile.mkdtemp(prefix="vtui-bench-"))
    pidfile = tmp / "pid"
    env = dict(
        os.environ,
        VTUI_STATE_DIR=str(tmp / "state"),
        VTUI_CONFIG_DIR=str(tmp / "config"),
        XDG_CACHE_HOME=str(tmp / "cache"),
        TERM="xterm-256color",
    )
    tmux = Tmux(120, 40)
    log = tmp / "child.log"  # the child's traceback, if it fails before its first frame
    cmd = (
        f"{sys.executable} {Path(__file__).resolve()} --child {n} --pidfile {pidfile} --up-for {up_for}"
        f" --log {log}"
    )
    try:
        t0 = time.perf_counter()
        keys = ("VTUI_STATE_DIR", "VTUI_CONFIG_DIR", "XDG_CACHE_HOME", "TERM", "PATH", "PYTHONPATH")
        tmux.start(cmd, env, keys)
        tmux.wait(lambda s: "inst00" in s and "GPU0" in s, log=log)
        first_frame = time.perf_counter() - t0
        proc = psutil.Process(int(pidfile.read_text()))
        time.sleep(1.0 if _smoke.on() else 3.0)  # warm up: all instances READY, samples flowing
        cpu0 = proc.cpu_times()
        w0 = time.perf_counter()
        time.sleep(seconds)
        cpu1 = proc.cpu_times()
        wall = time.perf_counter() - w0
        cpu_pct = 100.0 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / wall
        rss = proc.memory_info().rss
        latencies = []
        for _ in range(presses):  # sort the fleet table by name (`>`: its header shows NAME^), then back
            tmux("send-keys", "-t", "b", ">")
            latencies.append(tmux.wait(lambda s: "NAME^" in s, log=log))
            tmux("send-keys", "-t", "b", "<")
            latencies.append(tmux.wait(lambda s: "NAME^" not in s and "NAME" in s, log=log))
            time.sleep(0.05)
        return {
            "instances": n,
            "up_for_s": up_for,
            "cpu_percent_of_one_core": round(cpu_pct, 2),
            "rss_mb": round(rss / 2**20, 1),
            "key_to_screen_ms_p50": round(statistics.median(latencies) * 1000, 1),
            "key_to_screen_ms_p95": round(sorted(latencies)[int(0.95 * (len(latencies) - 1))] * 1000, 1),
            "first_frame_s": round(first_frame, 2),
            "measured_s": seconds,
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        subprocess.run(["tmux", "-L", tmux.sock, "kill-server"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pidfile", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    parser.add_argument("--profile", default=None, help="with --child: write cProfile stats here, then exit")
    parser.add_argument("--sizes", default="8,32")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--presses", type=int, default=15)
    parser.add_argument(
        "--up-for",
        default="0,600",
        help="comma list: how long the instances have been up when measuring starts (s)",
    )
    _smoke.tiny(parser, sizes="1", seconds=0.5, presses=1, up_for="0")
    args = parser.parse_args()
    if args.child:
        try:
            return child(args.child, args.pidfile, args.profile, args.seconds, float(args.up_for))
        except BaseException:
            if args.log:
                import traceback

                Path(args.log).write_text(traceback.format_exc())
            raise
    if not shutil.which("tmux"):
        if _smoke.on():
            return _smoke.skip("needs tmux")
        print("bench_ui needs tmux", file=sys.stderr)
        return 2
    results = [
        measure(int(n), args.seconds, args.presses, float(up))
        for n in args.sizes.split(",")
        for up in args.up_for.split(",")
    ]
    print(
        f"{'instances':>9} {'up for s':>8} {'CPU % core':>10} {'RSS MB':>7} {'key p50 ms':>10} {'key p95 ms':>10} {'1st frame s':>11}"
    )
    for r in results:
        print(
            f"{r['instances']:>9} {r['up_for_s']:>8.0f} {r['cpu_percent_of_one_core']:>10} {r['rss_mb']:>7} {r['key_to_screen_ms_p50']:>10} "
            f"{r['key_to_screen_ms_p95']:>10} {r['first_frame_s']:>11}"
        )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
