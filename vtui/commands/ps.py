"""`vtui ps [LAYOUT] [--json]`: the instances of a session and their state, as the session supervisor
sees them (started on demand; it re-adopts what runs). Works from a running supervisor even when the
layout file was moved, edited into an invalid state or deleted."""

from __future__ import annotations

import argparse
import json
import sys
import time

from vtui.commands._runs import CommandError, ServiceUnavailable, connect, print_json, row_of

HELP = "list the instances of a session: state, pid, port, GPUs, restarts (--json for scripts)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("layout", nargs="?", help="layout file (default: the session last used)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="[USER@]HOST",
        help="also list the last session of HOST (`vtui ps --json` run there over ssh; repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        session = connect([args.layout] if args.layout else [], command="ps", layout_only=True, starts=False)
        status = session.status()
    except CommandError as exc:
        return exc.code
    except ServiceUnavailable as exc:
        print(f"vtui ps: {exc}", file=sys.stderr)
        return 1
    rows = [row_of(i, status["supervisor_pid"]) for i in status["instances"]]
    failed = 0
    if args.host:
        for row in rows:
            row["host"] = None  # this machine
        for target in args.host:
            remote, why = _remote_rows(target)
            if why is not None:
                print(f"vtui ps: {target}: {why}", file=sys.stderr)
                failed = 1
            rows += remote
    try:
        return _print(status, rows, args.json) or failed
    except BrokenPipeError:  # `vtui ps | head`
        return 0


def _remote_rows(target: str) -> tuple[list[dict], str | None]:
    """HOST's rows (its last session, as `vtui ps --json` there lists it), each with its `host`."""
    import subprocess

    from vtui.service.ssh import host_label, run_remote

    try:
        done = run_remote(target, "ps --json")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], str(exc)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return [], lines[-1] if lines else f"exit {done.returncode}"
    try:
        rows = json.loads(done.stdout)
    except ValueError:
        return [], "printed no JSON (is vtui there? $VTUI_REMOTE_VTUI)"
    label = host_label(target)
    return [{**row, "host": label} for row in rows if isinstance(row, dict)], None


def _print(status: dict, rows: list[dict], as_json: bool) -> int:
    if as_json:
        print_json(rows)
        return 0
    print(
        f"session {status['session']} ({status.get('layout_path')}; supervisor pid {status['supervisor_pid']})"
    )
    for line in table(rows):
        print(line)
    return 0


COLUMNS = (
    ("NAME", "<"),
    ("STATE", "<"),
    ("PID", ">"),
    ("PORT", ">"),
    ("GPUS", "<"),
    ("RESTARTS", ">"),
    ("UP", ">"),
    ("MODEL", "<"),
)


def table(rows: list[dict]) -> list[str]:
    """The rows as aligned text: each column as wide as its widest cell (long names stay aligned);
    a failed instance's error goes on its own line under it. Rows of other hosts (`--host`): a HOST
    column after NAME."""
    hosts = any("host" in row for row in rows)
    columns = (COLUMNS[0], ("HOST", "<"), *COLUMNS[1:]) if hosts else COLUMNS
    cells = [
        [
            row["name"],
            *([row.get("host") or "local"] if hosts else []),
            state_cell(row),
            str(row["pid"] or "-"),
            str(row["port"] or "-"),
            ",".join(map(str, row["gpus"])) or "-",
            str(row["restarts"]),
            _duration(row["uptime_s"]) if row["uptime_s"] is not None else "-",
            _model_cell(row),
        ]
        for row in rows
    ]
    widths = [max([len(title), *(len(c[i]) for c in cells)]) for i, (title, _) in enumerate(columns)]

    def line(values: list[str]) -> str:
        parts = [f"{v:{align}{w}}" for v, (_, align), w in zip(values[:-1], columns, widths, strict=False)]
        return (" ".join(parts) + "  " + values[-1]).rstrip()

    out = [line([title for title, _ in columns])]
    for row, values in zip(rows, cells, strict=True):
        out.append(line(values))
        if row["last_error"] and row["state"] not in ("ready", "starting"):
            out.append(f"{'':<{widths[0]}} └ {row['last_error']}")
    return out


def state_cell(row: dict) -> str:
    """The state, and the operation under way with the one waiting: "ready (restart, 1 waiting)"."""
    operation, waiting = row.get("operation"), row.get("waiting")
    if not operation:
        return str(row["state"])
    return f"{row['state']} ({operation}{f', {waiting} waiting' if waiting else ''})"


def _model_cell(row: dict) -> str:
    """The model; a router's cell names the replicas it routes to."""
    if row.get("role") == "router":
        workers = row.get("workers") or []
        return f"router → {', '.join(workers) if workers else 'no replica'}"
    return " ".join(filter(None, (row["model"], row.get("url") and f"@ {row['url']}"))) or "-"


def _duration(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) if seconds < 86400 else f"{seconds / 86400:.1f}d"
