"""The session supervisor's memory while one instance floods its log: RSS over a window with no client
attached, then over a window with one feed client attached (reading everything, as a dashboard would).

The instance is `_flood_engine.py` (a `command = [...]` layout instance: /health on its port, FLOOD_RATE
100-character lines a second on stdout); the supervisor's own /metrics scrape is off (the engine has
none). Reports the supervisor's RSS (start, max, end of each window), the lines the engine wrote a
second, and what the feed client received (lines, and those the feed's byte bound left out).
`--code DIR` runs the supervisor from another vtui tree (e.g. an export of main, for a before figure).

    python benchmarks/bench_log_flood.py [--rate 100000] [--window 60] [--code DIR] [--out FILE.json]
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
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import _smoke
import psutil

ROOT = Path(__file__).resolve().parents[1]
ENGINE = Path(__file__).resolve().parent / "_flood_engine.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def layout_text(session: str, rate: int, count_file: Path) -> str:
    return f"""[session]
name = "{session}"

[[instance]]
name = "flood"
model = "flood"
port = {free_port()}
command = ["{sys.executable}", "{ENGINE}"]
restart = "never"
[instance.env]
FLOOD_RATE = "{rate}"
FLOOD_COUNT_FILE = "{count_file}"
"""


def vtui(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args], capture_output=True, text=True, env=env, timeout=300
    )


def written(count_file: Path) -> tuple[int, float]:
    try:
        n, t = count_file.read_text().split()
        return int(n), float(t)
    except (OSError, ValueError):
        return 0, 0.0


def window(sup: psutil.Process, seconds: float, count_file: Path) -> dict[str, Any]:
    """The supervisor's RSS each second of a window, and the engine's lines a second over it."""
    n0, t0 = written(count_file)
    rss: list[float] = []
    end = time.monotonic() + seconds
    while True:
        rss.append(sup.memory_info().rss / 2**20)
        if time.monotonic() >= end:
            break
        time.sleep(min(1.0, seconds / 4))
    n1, t1 = written(count_file)
    return {
        "rss_start_mib": round(rss[0], 1),
        "rss_max_mib": round(max(rss), 1),
        "rss_end_mib": round(rss[-1], 1),
        "lines_per_s_written": round((n1 - n0) / (t1 - t0)) if t1 > t0 else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=100_000, help="log lines a second the engine writes")
    parser.add_argument("--window", type=float, default=60.0, help="seconds of each window")
    parser.add_argument("--code", type=Path, default=ROOT, help="the vtui tree the supervisor runs from")
    parser.add_argument("--out", type=Path, help="write the figures here (JSON)")
    _smoke.tiny(parser, rate=2000, window=1.0)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="vtui-bench-flood-"))
    session = f"flood{uuid.uuid4().hex[:6]}"
    count_file = tmp / "written"
    env = os.environ | {
        "VTUI_STATE_DIR": str(tmp / "state"),
        "PYTHONPATH": str(args.code.resolve()),
        "VTUI_SUPERVISOR_GPU": "0",
        "VTUI_SUPERVISOR_SCRAPE_S": "0",  # the engine has no /metrics
    }
    os.environ.update(env)
    path = tmp / "layout.toml"
    path.write_text(layout_text(session, args.rate, count_file))
    from vtui.service.client import ServiceClient, ServiceError, ServiceUnavailable

    result: dict[str, Any] = {"rate": args.rate, "window_s": args.window, "code": str(args.code)}
    received = {"lines": 0, "omitted": 0, "bytes": 0}
    try:
        up = vtui("up", str(path), env=env)
        if up.returncode != 0:
            print(up.stdout, up.stderr, file=sys.stderr)
            return 1
        client = ServiceClient(session)
        sup = psutil.Process(client.get("/status")["supervisor_pid"])
        time.sleep(min(2.0, args.window))  # the flood under way
        result["no_client"] = window(sup, args.window, count_file)

        opened = threading.Event()

        def watch() -> None:
            try:
                for message in client.feed():
                    opened.set()
                    event = message.get("event") or {}
                    if message.get("type") == "event" and event.get("kind") == "lines":
                        received["lines"] += len(event["lines"])
                        received["omitted"] += event.get("omitted", 0)
            except Exception:  # noqa: BLE001 — the session going down ends the feed
                pass

        threading.Thread(target=watch, daemon=True).start()
        opened.wait(30)
        result["feed_client"] = window(sup, args.window, count_file)
        result["feed_client"]["lines_received"] = received["lines"]
        result["feed_client"]["lines_omitted_by_feed"] = received["omitted"]
        result["supervisor_cpu_s"] = round(sum(sup.cpu_times()[:2]), 1)
        result["load_average_1m"] = round(os.getloadavg()[0], 2)
        result["cores"] = os.cpu_count()
    finally:
        vtui("down", str(path), env=env)
        try:
            ServiceClient(session).post("/shutdown", {})
        except (ServiceUnavailable, ServiceError, OSError):  # gone already, or refusing: `down` stopped it
            pass
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.out and not _smoke.on():
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
