"""The dashboard's cost with several hosts (`vtui --host`, issue 17): H hosts x N sim instances refreshed
at 1 Hz in one fleet view. Host 1 is this machine's session; the others are session supervisors in
state dirs of their own, reached only through the ssh client path (`vtui sessions --json` over ssh,
then `ssh -N -L` forwarding each remote socket), with `vtui.testing.fake_ssh` as the ssh client (no
sshd here: it relays the forwarded sockets in Python, as OpenSSH's stream-local forwarding does).

Every supervisor scrapes its instances at 1 Hz and samples its (simulated) GPUs at 1 Hz; the dashboard
runs in a real terminal (tmux, 160x50) and gets every sample of every host. Measured over a steady
window, with psutil:

- dashboard CPU, % of one core: the dashboard process alone (user + system), target <= 2 %;
- the forwards' CPU (the fake ssh relays; a real OpenSSH client's cost differs, so it is reported
  apart, not hidden in the dashboard's figure), and each supervisor's;
- with `--baseline`, the same dashboard on this machine's session alone (N instances, no --host);
- with `--no-access-log`, sims that write no uvicorn access line per request (by default each writes
  two a second: the supervisor's own /health and /metrics probes, which every dashboard receives).

    python benchmarks/bench_hosts.py [--hosts 3] [--instances 8] [--window 30] [--baseline]
        [--out benchmarks/results/bench_hosts.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _smoke  # noqa: E402
from bench_ui import Tmux  # noqa: E402  (the same tmux driver as the single-host UI benchmark)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def layout_text(session: str, n: int, access_log: bool = True) -> str:
    parts = [f'[session]\nname = "{session}"\nallow_gpu_sharing = true\n']
    for i in range(n):
        parts.append(
            f"""
[[instance]]
name = "i{i}"
engine = "sim"
model = "Qwen/Qwen3-0.6B"
port = {free_port()}
gpus = [{i % 8}]
restart = "never"
[instance.flags]
max-model-len = 4096
sim-startup-scale = 0.0
"""
            + ("" if access_log else "disable-uvicorn-access-log = true\n")
        )
    return "".join(parts)


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL)


def cpu_of(procs: list) -> float:
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except Exception:  # noqa: BLE001 — gone: counts what it had
            continue
    return total


def measure(hosts: int, n: int, window: float, tmp: Path, access_log: bool = True) -> dict:
    import psutil

    py = sys.executable
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        VTUI_STATE_DIR=str(tmp / "local" / "state"),
        VTUI_CONFIG_DIR=str(tmp / "config"),
        XDG_CACHE_HOME=str(tmp / "cache"),
        VTUI_SSH=f"{py} -m vtui.testing.fake_ssh",
        VTUI_FAKE_SSH_ROOT=str(tmp / "hosts"),
        VTUI_REMOTE_VTUI=f"{py} -m vtui",
        VTUI_SUPERVISOR_GPU="1",
        VTUI_SUPERVISOR_SCRAPE_S="1",
        VTUI_SUPERVISOR_IDLE_S="5",
        TERM="xterm-256color",
    )
    (tmp / "hosts").mkdir(parents=True, exist_ok=True)
    local = tmp / "local.toml"
    local.write_text(layout_text("local", n, access_log))
    up = run([py, "-m", "vtui", "up", str(local)], env)
    assert up.returncode == 0, up.stdout + up.stderr
    targets = []
    for h in range(2, hosts + 1):
        path = tmp / f"gpu{h}.toml"
        path.write_text(layout_text(f"s{h}", n, access_log))
        up = run([py, "-m", "vtui.testing.fake_ssh", f"me@gpu{h}", py, "-m", "vtui", "up", str(path)], env)
        assert up.returncode == 0, up.stdout + up.stderr
        targets.append(f"me@gpu{h}")

    tmux = Tmux(160, 50)
    log = tmp / "dashboard.log"
    host_args = " ".join(f"--host {t}" for t in targets)
    entry = os.environ.get("BENCH_HOSTS_ENTRY", "-m vtui")  # (a profiling wrapper, by hand)
    cmd = f"exec {py} {entry} {local} --no-start {host_args}"
    keys = ("PYTHONPATH", "VTUI_STATE_DIR", "VTUI_CONFIG_DIR", "XDG_CACHE_HOME", "VTUI_SSH")
    keys += ("VTUI_FAKE_SSH_ROOT", "VTUI_REMOTE_VTUI", "TERM", "PATH", "PROF_OUT")
    try:
        tmux.start(cmd, env, keys)
        total = hosts * n
        t0 = time.perf_counter()
        tmux.wait(lambda s: f"{total}/{total} up" in s, timeout=180, log=log)
        attached_s = time.perf_counter() - t0
        pane = int(tmux("display-message", "-p", "-t", "b", "#{pane_pid}").strip())
        dashboard = psutil.Process(pane)
        assert "vtui" in " ".join(dashboard.cmdline()), dashboard.cmdline()
        time.sleep(1.0 if _smoke.on() else 5.0)  # warm up: every host's history backfilled, samples flowing
        relays = [p for p in dashboard.children(recursive=True) if "fake_ssh" in " ".join(p.cmdline())]
        sups = [
            p
            for p in psutil.process_iter()
            if "vtui.service" in " ".join(_cmdline(p)) and str(tmp) in str(_environ(p).get("VTUI_STATE_DIR"))
        ]
        d0, r0, s0 = cpu_of([dashboard]), cpu_of(relays), [cpu_of([p]) for p in sups]
        w0 = time.perf_counter()
        time.sleep(window)
        wall = time.perf_counter() - w0
        d1, r1, s1 = cpu_of([dashboard]), cpu_of(relays), [cpu_of([p]) for p in sups]
        screen = tmux.screen()
        return {
            "hosts": hosts,
            "instances_per_host": n,
            "access_log": access_log,
            "rows": total,
            "dashboard_cpu_pct_one_core": round(100 * (d1 - d0) / wall, 2),
            "forwards": len(relays),
            "forwards_cpu_pct_one_core_fake_ssh": round(100 * (r1 - r0) / wall, 2),
            "supervisors_cpu_pct_one_core": [
                round(100 * (b - a) / wall, 2) for a, b in zip(s0, s1, strict=True)
            ],
            "dashboard_rss_mib": round(dashboard.memory_info().rss / 2**20, 1),
            "attached_all_s": round(attached_s, 1),
            "window_s": round(wall, 1),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "screen_has_every_host": all(f"gpu{h}" in screen for h in range(2, hosts + 1)),
        }
    finally:
        subprocess.run(["tmux", "-L", tmux.sock, "kill-server"], capture_output=True)
        for h in range(2, hosts + 1):
            path = tmp / f"gpu{h}.toml"
            run([py, "-m", "vtui.testing.fake_ssh", f"me@gpu{h}", py, "-m", "vtui", "down", str(path)], env)
        run([py, "-m", "vtui", "down", str(local)], env)


def _cmdline(proc) -> list[str]:
    import psutil

    try:
        return proc.cmdline()
    except psutil.Error:  # gone, or another user's
        return []


def _environ(proc) -> dict:
    import psutil

    try:
        return proc.environ()
    except psutil.Error:  # gone, or another user's
        return {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3, help="hosts in the view, this machine included")
    parser.add_argument("--instances", type=int, default=8, help="sim instances per host")
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--baseline", action="store_true", help="also this machine's session alone")
    parser.add_argument(
        "--no-access-log",
        action="store_true",
        help="sims without uvicorn access lines (2 per instance per second: the supervisor's own probes)",
    )
    parser.add_argument("--out", type=Path, default=None)
    _smoke.tiny(parser, hosts=2, instances=1, window=0.5)
    args = parser.parse_args()
    if _smoke.on() and not shutil.which("tmux"):
        return _smoke.skip("needs tmux")
    results = {"cores": os.cpu_count(), "runs": []}
    sizes = [args.hosts] + ([1] if args.baseline else [])
    for hosts in sizes:
        tmp = Path(tempfile.mkdtemp(prefix="vtui-hosts-"))
        try:
            result = measure(hosts, args.instances, args.window, tmp, not args.no_access_log)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(json.dumps(result), flush=True)
        results["runs"].append(result)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
