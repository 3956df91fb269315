"""Where the session supervisor's CPU goes, in bench_service.py's setting (N sim instances, /metrics and
/health at 1 Hz, one feed client): the supervisor is started first by this script's `--child` mode (`vtui up` then finds it), which
turns cProfile on at SIGUSR1 and writes the profile at SIGUSR2: only the steady window is profiled (no
start-up, no launches). The top functions are printed.

    python benchmarks/profile_service.py [--instances 8] [--window 30] [--sort tottime] [--out FILE.prof]
"""

from __future__ import annotations

import argparse
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import ROOT, layout_text, vtui  # noqa: E402


def child(prof: Path, layout: str) -> int:
    """The supervisor (`python -m vtui.service --layout LAYOUT`), profiled between SIGUSR1 and SIGUSR2."""
    import cProfile

    from vtui.service.__main__ import main as service_main

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
    parser.add_argument("--child", nargs=2, metavar=("PROF", "LAYOUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(Path(args.child[0]), args.child[1])

    tmp = Path(tempfile.mkdtemp(prefix="vtui-profile-service-"))
    session = f"prof{uuid.uuid4().hex[:6]}"
    env = os.environ | {
        "VTUI_STATE_DIR": str(tmp / "state"),
        "PYTHONPATH": str(ROOT),
        "VTUI_SUPERVISOR_GPU": "0",
        "VTUI_SUPERVISOR_SCRAPE_S": str(args.scrape_s),
    }
    os.environ.update(env)
    path = tmp / "layout.toml"
    path.write_text(layout_text(session, args.instances))
    prof = args.out or tmp / "supervisor.prof"
    from vtui.service import locations
    from vtui.service.client import ServiceClient

    (tmp / "state").mkdir(parents=True, exist_ok=True)
    log = open(locations.log_path(session), "ab")  # noqa: SIM115 — the supervisor's stdio, as ensure_supervisor's
    sup = subprocess.Popen(
        [sys.executable, __file__, "--child", str(prof), str(path)],
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
        time.sleep(3.0)
        load0 = os.getloadavg()[0]
        if args.py_spy:
            raw = tmp / "py-spy.txt"
            spy = [args.py_spy, "record", "-p", str(sup.pid), "-d", str(int(args.window)), "-r", "500"]
            subprocess.run([*spy, "-f", "raw", "-o", str(raw)], capture_output=True, timeout=args.window + 60)
        else:
            sup.send_signal(signal.SIGUSR1)
            time.sleep(args.window)
            sup.send_signal(signal.SIGUSR2)
            time.sleep(1.0)
        print(f"load average (1 min): {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end", file=sys.stderr)
    finally:
        vtui("down", str(path), env=env)
        try:
            client.post("/shutdown", {})
        except Exception:
            pass
        sup.wait(60)
        log.close()
    if args.py_spy:
        summarize(raw, args.top)
        return 0
    stats = pstats.Stats(str(prof))
    stats.sort_stats(args.sort).print_stats(args.top)
    return 0


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
