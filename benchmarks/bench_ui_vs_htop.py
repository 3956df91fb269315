"""vtui's dashboard as a client of a real session supervisor (as `vtui LAYOUT` runs it), against
vllm-htop watching the same simulated instances (real `vtui sim` processes serving /metrics over HTTP),
each at a 1 s refresh in the same 120x40 tmux terminal, one after the other: CPU % of one core and RSS
of the monitor's process alone; for vtui also the time to its first frame with data (the tmux window
opened to the first instance's row and the GPU panel drawn) and key-press-to-screen latency (`>` sorts
the fleet table: its header shows NAME^). The machine's 1-minute load average is recorded beside
each figure (other work on a shared machine skews them). vtui's modules are compiled to bytecode first, as
an installed vtui's are (`--no-compile`: with PYTHONDONTWRITEBYTECODE set, a source tree is compiled
on every start, some 0.3-0.5 s of its first frame). For the first frame alone (A/B runs):
`--no-htop --seconds 0.5 --warmup 0 --presses 0 --repeat 3`. `--tree DIR[,DIR…]`: the dashboards of
other checkouts, alternated run by run on the same supervisor (the one this tree's `vtui up` starts;
`python -m vtui` run in DIR imports DIR's vtui first), for A/B figures from one machine at one time.
`--aged 660`: the supervisor runs 11 minutes first, so each dashboard backfills a full 10-minute history
(600 samples an instance), the memory a dashboard holds once it has run that long.

    pip install vllm-htop   # into any venv; it needs only the standard library
    python benchmarks/bench_ui_vs_htop.py --htop /path/to/venv/bin/vllm-htop --sizes 8,32 --repeat 2

At 8 instances on a shared 2-core machine (load 1.5-2): ead70d2 1.27 % of a core (vllm-htop 4.57 %,
ratio 0.28); with the orjson feed codec, the instance pane on the Line API and the GC threshold 1.10 %
(vllm-htop 4.73 %, ratio 0.23), RSS 50 MB, key p50 24 ms / max 39 ms. A/B alternated on one
supervisor (40 s each): 1.25 -> 1.04 % mean of three (benchmarks/results/bench_ui_cpu_8.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _smoke
from bench_ui import Tmux

LAYOUT = """[session]
name = "vs-htop"
allow_gpu_sharing = true
gpu_memory_gib = 80
"""
# 0.24 of a simulated 80 GiB GPU each: 32 instances on 8 GPUs pass vtui's free-memory check
INSTANCE = """
[[instance]]
name = "inst{i:02d}"
engine = "sim"
model = "Qwen/Qwen3-8B"
port = {port}
gpus = [{gpu}]

[instance.flags]
max-num-seqs = 64
max-model-len = 4096
gpu-memory-utilization = 0.24
sim-startup-scale = 0
sim-load = 2
"""


KEEP = ("VTUI_STATE_DIR", "VTUI_CONFIG_DIR", "PATH", "PYTHONPATH", "TERM")  # the monitors' environment


def monitor_cost(
    tmux_cmd: str, env: dict, ready: tuple[str, ...], seconds: float, presses: int = 0, warmup: float = 5.0
) -> dict:
    import psutil

    tmux = Tmux(120, 40)
    try:
        t0 = time.perf_counter()
        tmux.start(tmux_cmd, env, KEEP)
        tmux.wait(lambda s: all(r in s for r in ready), timeout=90)
        first_frame = time.perf_counter() - t0
        load_at_start = os.getloadavg()[0]
        pane_pid = int(tmux("display-message", "-p", "-t", "b", "#{pane_pid}").strip())
        time.sleep(warmup)  # warm up (the dashboard's history backfill lands in it)
        root = psutil.Process(pane_pid)
        procs = [root, *root.children(recursive=True)]  # the shell tmux ran (if any) and the monitor

        def cpu() -> float:
            return sum(t.user + t.system for t in (p.cpu_times() for p in procs))

        c0, w0 = cpu(), time.perf_counter()
        time.sleep(seconds)
        c1, wall = cpu(), time.perf_counter() - w0
        rss = max(p.memory_info().rss for p in procs)
        result = {
            "cpu_percent_of_one_core": round(100.0 * (c1 - c0) / wall, 2),
            "rss_mb": round(rss / 2**20, 1),
            "first_frame_s": round(first_frame, 2),
            "load_average_1m": [round(load_at_start, 2), round(os.getloadavg()[0], 2)],
        }
        latencies = []
        for _ in range(presses):  # sort by name (header NAME^), then back
            tmux("send-keys", "-t", "b", ">")
            latencies.append(tmux.wait(lambda s: "NAME^" in s))
            tmux("send-keys", "-t", "b", "<")
            latencies.append(tmux.wait(lambda s: "NAME^" not in s and "NAME" in s))
            time.sleep(0.05)
        if latencies:
            result["key_to_screen_ms_p50"] = round(statistics.median(latencies) * 1000, 1)
            result["key_to_screen_ms_max"] = round(max(latencies) * 1000, 1)
        return result
    finally:
        subprocess.run(["tmux", "-L", tmux.sock, "kill-server"], capture_output=True)


def one_size(n: int, args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="vtui-vs-htop-"))
    env = dict(
        os.environ,
        VTUI_STATE_DIR=str(tmp / "state"),
        VTUI_CONFIG_DIR=str(tmp / "config"),
        TERM="xterm-256color",
    )
    layout = tmp / "vs-htop.toml"
    ports = [args.base_port + i for i in range(n)]
    layout.write_text(LAYOUT + "".join(INSTANCE.format(i=i, port=p, gpu=i % 8) for i, p in enumerate(ports)))
    vtui = [sys.executable, "-m", "vtui"]
    runs: list[dict] = []
    try:
        up = subprocess.run(
            [*vtui, "up", str(layout), "--timeout", "180"], env=env, capture_output=True, text=True
        )
        if up.returncode:  # say why (a port another program holds, a refused start)
            raise RuntimeError(f"vtui up failed ({up.returncode}):\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
        if args.aged:  # the supervisor's history fills (600 samples an instance: a new dashboard's backfill)
            time.sleep(args.aged)
        urls = " ".join(f"http://127.0.0.1:{p}" for p in ports)
        for _ in range(args.repeat):
            run: dict = {}
            if args.htop:
                run["vllm_htop"] = monitor_cost(
                    f"{args.htop} --url {urls} --interval 1 --no-gpu-detect",
                    env,
                    (str(args.base_port),),
                    args.seconds,
                )
            for tree in args.tree or [None]:  # this checkout's dashboard, or each of --tree's in turn
                cd = f"cd {shlex.quote(str(tree))} && " if tree else ""
                run["vtui" if tree is None else f"vtui@{tree}"] = monitor_cost(
                    f"{cd}{' '.join(vtui)} {layout} --no-start",
                    env,
                    ("inst00", "READY", "GPU0"),
                    args.seconds,
                    args.presses,
                    args.warmup,
                )
            if args.htop:  # one ratio per dashboard measured (cpu_ratio_vtui_to_htop without --tree)
                htop_cpu = max(run["vllm_htop"]["cpu_percent_of_one_core"], 0.01)
                for key in [k for k in run if k.startswith("vtui")]:
                    run[f"cpu_ratio_{key}_to_htop"] = round(run[key]["cpu_percent_of_one_core"] / htop_cpu, 2)
            runs.append(run)
        if args.profile:  # the dashboard's main thread under cProfile (bench_ui_profile.py), after the runs
            out = args.profile / f"vtui_{n}.prof"
            profiler = Path(__file__).resolve().parent / "bench_ui_profile.py"
            tmux = Tmux(120, 40)
            try:
                command = (
                    f"{sys.executable} {profiler} --out {out} --seconds {args.seconds} -- {layout} --no-start"
                )
                tmux.start(command, env, KEEP, remain=False)
                deadline = time.monotonic() + args.seconds + 60
                while not out.exists() and time.monotonic() < deadline:
                    time.sleep(0.5)
            finally:
                subprocess.run(["tmux", "-L", tmux.sock, "kill-server"], capture_output=True)
    finally:
        subprocess.run([*vtui, "down", str(layout)], env=env, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return {"instances": n, "seconds": args.seconds, "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--htop", default=shutil.which("vllm-htop"), help="the vllm-htop executable")
    parser.add_argument("--no-htop", action="store_true", help="measure vtui alone")
    parser.add_argument("--sizes", default="8", help="comma list of instance counts")
    parser.add_argument("--repeat", type=int, default=1, help="measurements per size (one supervisor)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--presses", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after the first frame, unmeasured")
    parser.add_argument("--no-compile", action="store_true", help="leave vtui's bytecode as it is")
    parser.add_argument("--base-port", type=int, default=9300)
    parser.add_argument(
        "--aged",
        type=float,
        default=0.0,
        help="seconds the supervisor runs before the first measurement (660: its 10-minute history is full)",
    )
    parser.add_argument(
        "--tree",
        type=lambda text: [Path(t).resolve() for t in text.split(",")],
        help="comma list of checkouts whose dashboards to measure instead of this one's (A/B)",
    )
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument(
        "--profile", type=Path, help="also profile the dashboard once per size: DIR/vtui_N.prof"
    )
    if _smoke.on():  # one instance on a free port, vtui alone (vllm-htop takes ~15 s to its first frame here)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        _smoke.tiny(parser, sizes="1", seconds=0.5, presses=1, warmup=0.5, base_port=port, no_htop=True)
    args = parser.parse_args()
    if args.no_htop:
        args.htop = None
    if _smoke.on() and not shutil.which("tmux"):
        return _smoke.skip("needs tmux")
    if not shutil.which("tmux") or (not args.htop and not args.no_htop):
        print("needs tmux and vllm-htop (--htop PATH, or --no-htop)", file=sys.stderr)
        return 2
    if not args.no_compile:
        import compileall

        import vtui

        for root in [Path(vtui.__file__).parent, *(t / "vtui" for t in args.tree or [])]:
            compileall.compile_dir(str(root), quiet=1)
    results = []
    for n in args.sizes.split(","):
        results.append(one_size(int(n), args))
        text = json.dumps(results, indent=1)
        if args.out:  # after each size: a later failure keeps what was measured
            args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
