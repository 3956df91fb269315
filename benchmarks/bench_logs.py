"""The log view under load, on the real app in a real terminal (tmux): following N lines/s for a while
(RSS, does it keep following, key-to-screen latency), a flood (~130k lines/s: does Esc answer), and the
RSS on the dashboard before, during and after a visit to the log view.

The instance is the in-memory FakeSupervisor; its `run()` (on the app's loop, where the real supervisor's
tick runs) emits a batch every 0.2 s as the real log tailer does. Lines come from a pool of 50k distinct
~110-byte lines (made before the clock starts: the feeder's cost is not vtui's); every batch ends with
`seq N`, the count of lines emitted so far, which the parent reads off the screen. A tenth of the lines are
vLLM access lines of vtui's own probes (hidden by default).

    python benchmarks/bench_logs.py --rate 5000 --seconds 120      # follow mode
    python benchmarks/bench_logs.py --rate 130000 --seconds 20     # flood
    python benchmarks/bench_logs.py --child --rate 5000 ...        # the app alone (what tmux runs)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import _smoke

TICK = 0.2
SETTLE_S = 1.0 if _smoke.on() else 2.0  # the dashboard before the log view (and, smoke, after it)
SEQ = re.compile(r"seq (\d+)")


def trace_loop(path: str, slow_ms: float = 15.0) -> None:
    """Record, into `path`, every callback of the UI's loop that ran over `slow_ms` and every GC pause
    over 2 ms (what a key waits behind); a diagnosis aid (`--trace`), not part of the figures."""
    import asyncio.events
    import gc

    out = open(path, "w", buffering=1)  # open for the process's life
    run = asyncio.events.Handle._run
    gc_start = [0.0]

    def timed(self: asyncio.events.Handle) -> None:
        t = time.perf_counter()
        run(self)
        ms = (time.perf_counter() - t) * 1000
        if ms > slow_ms:
            out.write(f"{time.time():.3f} {ms:.1f}ms {self._callback!r:.300}\n")

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
            return
        ms = (time.perf_counter() - gc_start[0]) * 1000
        if ms > 2:
            out.write(
                f"{time.time():.3f} {ms:.1f}ms gc gen{info.get('generation')} {info.get('collected')}\n"
            )

    def timing(owner: type, name: str) -> None:
        inner = getattr(owner, name)

        def wrapped(*args: object, **kwargs: object) -> object:
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                out.write(f"{time.time():.3f} {(time.perf_counter() - t) * 1000:.1f}ms {name}\n")

        setattr(owner, name, wrapped)

    from textual.app import App
    from textual.screen import Screen

    from vtui.ui.app import VtuiApp
    from vtui.ui.screens.logs import LogScreen

    timing(VtuiApp, "on_telemetry_batch")
    timing(VtuiApp, "on_logs_arrived")
    timing(Screen, "_on_timer_update")
    timing(App, "_display")
    timing(LogScreen, "action_toggle_probes")
    asyncio.events.Handle._run = timed  # type: ignore[method-assign]
    gc.callbacks.append(on_gc)


def feeding_supervisor(rate: int, seqfile: str | None = None):
    """The FakeSupervisor whose `run()` emits `rate` lines/s in batches every TICK (what the app runs);
    with `seqfile`, the count emitted so far is written there after each batch."""
    from vtui.core.model import InstanceSpec, Layout, SessionSpec
    from vtui.testing.fake_supervisor import FakeSupervisor

    layout = Layout(
        SessionSpec("benchlogs"), (InstanceSpec("inst00", "Qwen/Qwen3-8B", 9000, engine="sim", gpus=(0,)),)
    )
    pool = [
        f'INFO:     127.0.0.1:{40000 + i % 20000} - "GET /metrics HTTP/1.1" 200 OK'
        if i % 10 == 0
        else f"INFO 12-01 13:{i % 60:02d}:{i % 59:02d} [loggers.py:123] Engine 000: Avg prompt throughput:"
        f" {i % 997}.0 tokens/s, request {i}"
        for i in range(50_000)
    ]
    per_tick = max(1, int(rate * TICK))

    class Feeding(FakeSupervisor):
        async def run(self) -> None:
            seq, pos = 0, 0
            loop = asyncio.get_running_loop()
            next_at = loop.time()
            while True:
                if pos + per_tick - 1 > len(pool):
                    pos = 0
                batch = pool[pos : pos + per_tick - 1]
                pos += per_tick - 1
                seq += per_tick
                batch.append(f"INFO seq {seq}")
                self.emit_logs("inst00", batch)
                if seqfile is not None:
                    with open(seqfile, "w") as fh:
                        fh.write(f"{seq} {time.time()}")
                next_at += TICK
                await asyncio.sleep(max(0.0, next_at - loop.time()))

    return Feeding(layout)


def child(rate: int, pidfile: str, seqfile: str, trace: str | None = None) -> int:
    from vtui.ui.app import make_app

    Path(pidfile).write_text(str(os.getpid()))
    if trace:
        trace_loop(trace)
    app = make_app(supervisor=feeding_supervisor(rate, seqfile), gpu_sampler=False)
    app.run()
    return 0


class Tmux:
    def __init__(self, cols: int, rows: int) -> None:
        self.sock, self.cols, self.rows = f"vtui-benchlogs-{uuid.uuid4().hex[:6]}", cols, rows

    def __call__(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.sock, *args], check=True, capture_output=True, text=True
        ).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "b")

    def wait(self, pred, timeout=30.0, poll=0.002) -> float:
        start = time.perf_counter()
        while time.perf_counter() - start < timeout:
            if pred(self.screen()):
                return time.perf_counter() - start
            time.sleep(poll)
        raise TimeoutError(self.screen())


class PaneStream:
    """The bytes the app writes to its terminal, copied by tmux (`pipe-pane`) into a file: a key's answer
    is seen when the app writes it, found by reading the file, where polling `capture-pane` spawns a
    tmux client every few ms (on a loaded 2-core machine, CPU taken from the app while it answers)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.buf = path, 0, b""

    def _read(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        self.offset += len(data)
        self.buf += data

    def mark(self) -> None:
        """Forget what was written so far (call just before sending a key)."""
        self._read()
        self.buf = b""

    def wait(self, pattern: re.Pattern[bytes], timeout: float = 10.0, poll: float = 0.001) -> float:
        start = time.perf_counter()
        while time.perf_counter() - start < timeout:
            self._read()
            if pattern.search(self.buf):
                return time.perf_counter() - start
            self.buf = self.buf[-256:]  # a match may span two reads
            time.sleep(poll)
        raise TimeoutError(f"{pattern.pattern!r} not written within {timeout}s")


SHOWN = re.compile(rb"probes shown \(P hides\)")
HIDDEN = re.compile(rb"following \| \d+ probe lines hidden")


def shown_seq(screen: str) -> int | None:
    found = SEQ.findall(screen)
    return int(found[-1]) if found else None


def measure(
    rate: int, seconds: float, presses: int, trace: str | None = None, detect: str = "stream"
) -> dict:
    import psutil

    tmp = Path(tempfile.mkdtemp(prefix="vtui-benchlogs-"))
    pidfile, seqfile = tmp / "pid", tmp / "seq"
    env = {
        "VTUI_STATE_DIR": str(tmp / "state"),
        "VTUI_CONFIG_DIR": str(tmp / "config"),
        "XDG_CACHE_HOME": str(tmp / "cache"),
        "TERM": "xterm-256color",
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    load_start = round(os.getloadavg()[0], 2)
    tmux = Tmux(120, 40)
    cmd = (
        f"{sys.executable} {Path(__file__).resolve()} --child --rate {rate} --pidfile {pidfile}"
        f" --seqfile {seqfile}" + (f" --trace {trace}" if trace else "")
    )
    try:
        tmux(
            "new-session", "-d", "-s", "b", "-x", "120", "-y", "40",
            *[a for k, v in env.items() for a in ("-e", f"{k}={v}")], cmd,
        )  # fmt: skip
        tmux.wait(lambda s: "inst00" in s and "ready" in s)
        stream = None
        if detect == "stream":
            stream = PaneStream(tmp / "pane.out")
            tmux("pipe-pane", "-t", "b", "-o", f"cat >> {tmp / 'pane.out'}")
        proc = psutil.Process(int(pidfile.read_text()))
        time.sleep(SETTLE_S)
        rss_dashboard_before = proc.memory_info().rss
        tmux("send-keys", "-t", "b", "l")
        tmux.wait(lambda s: "logs inst00" in s)
        samples: list[dict] = []
        cpu0, w0 = proc.cpu_times(), time.perf_counter()
        stalls, last_shown, max_rss = 0, -1, 0
        end = time.perf_counter() + seconds
        latencies: list[float] = []
        next_press = time.perf_counter() + 1.0
        while time.perf_counter() < end:
            time.sleep(1.0)
            screen = tmux.screen()
            seq_shown = shown_seq(screen)
            try:
                emitted = int(seqfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                emitted = 0
            rss = proc.memory_info().rss
            max_rss = max(max_rss, rss)
            if seq_shown is None or seq_shown <= last_shown:
                stalls += 1
            last_shown = seq_shown if seq_shown is not None else last_shown
            samples.append({"emitted": emitted, "shown": seq_shown, "rss_mb": round(rss / 2**20, 1)})
            if presses and time.perf_counter() >= next_press and len(latencies) < presses * 2:
                # a key answered: P shows the probes, P hides them again (the status line says which)
                for shown in (True, False):
                    sent = time.time()
                    if stream is not None:
                        stream.mark()
                    tmux("send-keys", "-t", "b", "P")
                    if stream is not None:
                        latencies.append(stream.wait(SHOWN if shown else HIDDEN))
                    else:
                        latencies.append(
                            tmux.wait(lambda s, shown=shown: ("probes shown" in s) == shown, timeout=10)
                        )
                    if trace:
                        with open(trace + ".keys", "a") as fh:
                            fh.write(f"{sent:.3f} key {latencies[-1] * 1000:.1f}ms\n")
                next_press = time.perf_counter() + 1.0
        cpu1, wall = proc.cpu_times(), time.perf_counter() - w0
        cpu_pct = 100.0 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / wall
        t = time.perf_counter()
        tmux("send-keys", "-t", "b", "Escape")
        esc_s = tmux.wait(lambda s: "logs inst00" not in s, timeout=30)
        esc_s = time.perf_counter() - t
        time.sleep(SETTLE_S if _smoke.on() else 5.0)
        rss_after = proc.memory_info().rss
        lags = [s["emitted"] - s["shown"] for s in samples if s["shown"] is not None]
        return {
            "rate_lines_per_s": rate,
            "measured_s": seconds,
            "cpu_percent_of_one_core": round(cpu_pct, 1),
            "rss_mb_dashboard_before": round(rss_dashboard_before / 2**20, 1),
            "rss_mb_max_in_log_view": round(max_rss / 2**20, 1),
            "rss_mb_dashboard_5s_after_leaving": round(rss_after / 2**20, 1),
            "stalled_samples": stalls,
            "samples": len(samples),
            "lag_lines_p50": int(statistics.median(lags)) if lags else None,
            "lag_lines_max": max(lags) if lags else None,
            "key_to_screen_ms_p50": round(statistics.median(latencies) * 1000, 1) if latencies else None,
            "key_to_screen_ms_max": round(max(latencies) * 1000, 1) if latencies else None,
            "esc_to_dashboard_ms": round(esc_s * 1000, 1),
            "key_to_screen_ms_p95": (
                round(sorted(latencies)[int(0.95 * (len(latencies) - 1))] * 1000, 1) if latencies else None
            ),
            "key_presses": len(latencies),
            "key_detect": detect,
            "load_avg_1m_start_end": [load_start, round(os.getloadavg()[0], 2)],
        }
    finally:
        subprocess.run(["tmux", "-L", tmux.sock, "kill-server"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pidfile", help=argparse.SUPPRESS)
    parser.add_argument("--seqfile", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=int, default=5000, help="lines per second")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--trace", help="write the UI loop's slow callbacks and GC pauses to this file")
    parser.add_argument(
        "--detect",
        choices=("stream", "pane"),
        default="stream",
        help="how a key's answer is seen: in the app's output (tmux pipe-pane, default), or by polling"
        " capture-pane every 2 ms (the method before 2026-12-01; it spawns a tmux client per poll)",
    )
    parser.add_argument("--presses", type=int, default=20, help="P presses (each measured twice)")
    _smoke.tiny(parser, rate=100, seconds=0.5, presses=1)
    args = parser.parse_args()
    if args.child:
        return child(args.rate, args.pidfile, args.seqfile, args.trace)
    if not shutil.which("tmux"):
        if _smoke.on():
            return _smoke.skip("needs tmux")
        print("bench_logs needs tmux", file=sys.stderr)
        return 2
    result = measure(args.rate, args.seconds, args.presses, args.trace, args.detect)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
