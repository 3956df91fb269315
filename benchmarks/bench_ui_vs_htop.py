"""vtui's dashboard against vllm-htop watching the same 8 simulated instances (real `vtui sim` processes
serving /metrics over HTTP), each at a 1 s refresh in the same 120x40 tmux terminal, one after the other:
CPU % of one core and RSS of the monitor's process alone.

    pip install vllm-htop   # into any venv; it needs only the standard library
    python benchmarks/bench_ui_vs_htop.py --htop /path/to/venv/bin/vllm-htop
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ui import Tmux  # noqa: E402

LAYOUT = """[session]
name = "vs-htop"
allow_gpu_sharing = true
gpu_memory_gib = 80
"""
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
sim-startup-scale = 0
sim-load = 2
"""


def monitor_cost(tmux_cmd: str, env: dict, ready: str, seconds: float) -> dict:
    import psutil

    tmux = Tmux(120, 40)
    keep = [
        a
        for k in ("VTUI_STATE_DIR", "VTUI_CONFIG_DIR", "PATH", "PYTHONPATH", "TERM")
        for a in ("-e", f"{k}={env.get(k, '')}")
    ]
    try:
        tmux("-f", "/dev/null", "new-session", "-d", "-s", "b", "-x", "120", "-y", "40", *keep, tmux_cmd)
        tmux("set-option", "-t", "b", "remain-on-exit", "on")
        tmux.wait(lambda s: ready in s, timeout=90)
        pane_pid = int(tmux("display-message", "-p", "-t", "b", "#{pane_pid}").strip())
        time.sleep(5.0)  # warm up
        root = psutil.Process(pane_pid)
        procs = [root, *root.children(recursive=True)]  # the shell tmux ran (if any) and the monitor

        def cpu() -> float:
            return sum(t.user + t.system for t in (p.cpu_times() for p in procs))

        c0, w0 = cpu(), time.perf_counter()
        time.sleep(seconds)
        c1, wall = cpu(), time.perf_counter() - w0
        rss = max(p.memory_info().rss for p in procs)
        return {
            "cpu_percent_of_one_core": round(100.0 * (c1 - c0) / wall, 2),
            "rss_mb": round(rss / 2**20, 1),
        }
    finally:
        subprocess.run(["tmux", "-L", tmux.sock, "kill-server"], capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--htop", default=shutil.which("vllm-htop"), help="the vllm-htop executable")
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--base-port", type=int, default=9300)
    args = parser.parse_args()
    if not args.htop or not shutil.which("tmux"):
        print("needs tmux and vllm-htop (--htop PATH)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="vtui-vs-htop-"))
    env = dict(
        os.environ,
        VTUI_STATE_DIR=str(tmp / "state"),
        VTUI_CONFIG_DIR=str(tmp / "config"),
        TERM="xterm-256color",
    )
    layout = tmp / "vs-htop.toml"
    ports = [args.base_port + i for i in range(args.instances)]
    layout.write_text(LAYOUT + "".join(INSTANCE.format(i=i, port=p, gpu=i % 8) for i, p in enumerate(ports)))
    vtui = [sys.executable, "-m", "vtui"]
    try:
        subprocess.run(
            [*vtui, "up", str(layout), "--timeout", "120"], env=env, check=True, capture_output=True
        )
        urls = " ".join(f"http://127.0.0.1:{p}" for p in ports)
        htop = monitor_cost(
            f"{args.htop} --url {urls} --interval 1 --no-gpu-detect", env, "9300", args.seconds
        )
        ours = monitor_cost(f"{' '.join(vtui)} {layout} --no-start", env, "inst07", args.seconds)
    finally:
        subprocess.run([*vtui, "down", str(layout)], env=env, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "instances": args.instances,
        "seconds": args.seconds,
        "vllm_htop": htop,
        "vtui": ours,
        "cpu_ratio_vtui_to_htop": round(
            ours["cpu_percent_of_one_core"] / max(htop["cpu_percent_of_one_core"], 0.01), 2
        ),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
