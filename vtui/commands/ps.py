"""`vtui ps [LAYOUT] [--json]`: the instances of a session and their state, read from run records
(pid + create time) and /health, with no supervisor running."""

from __future__ import annotations

import argparse
import json
import time

from vtui.commands._runs import CommandError, instance_rows, load_session

HELP = "list the instances of a session: state, pid, port, GPUs, restarts (--json for scripts)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("layout", nargs="?", help="layout file (default: the session last used)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")


def run(args: argparse.Namespace) -> int:
    try:
        layout, _ = load_session([args.layout] if args.layout else [])
    except CommandError as exc:
        return exc.code
    rows = instance_rows(layout)
    try:
        return _print(layout, rows, args.json)
    except BrokenPipeError:  # `vtui ps | head`
        return 0


def _print(layout, rows: list[dict], as_json: bool) -> int:
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"session {layout.session.name} ({layout.path})")
    header = f"{'NAME':<16} {'STATE':<10} {'PID':>7} {'PORT':>6} {'GPUS':<8} {'RESTARTS':>8} {'UP':>8}  MODEL"
    print(header)
    for row in rows:
        gpus = ",".join(map(str, row["gpus"])) or "-"
        up = _duration(row["uptime_s"]) if row["uptime_s"] is not None else "-"
        print(f"{row['name']:<16} {row['state']:<10} {row['pid'] or '-':>7} {row['port'] or '-':>6} "
              f"{gpus:<8} {row['restarts']:>8} {up:>8}  {row['model'] or '-'}")
        if row["last_error"] and row["state"] not in ("ready", "starting"):
            print(f"{'':<16} └ {row['last_error']}")
    return 0


def _duration(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) if seconds < 86400 else f"{seconds / 86400:.1f}d"
