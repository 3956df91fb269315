"""`vtui logs [LAYOUT] NAME [-f] [-n N] [--json]`: the last lines of an instance's log (across rotated
files), the log the session supervisor names; `-f` follows it, across rotations and restarts, until
Ctrl-C."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from urllib.parse import quote

from vtui.commands._input import Value, line_count
from vtui.commands._runs import CommandError, ServiceError, ServiceUnavailable, connect, print_json

HELP = "show (and with -f follow) the log of one instance"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "words",
        nargs="+",
        metavar="[LAYOUT] NAME",
        help="layout file (default: the session last used), then the instance name",
    )
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    parser.add_argument(
        "-n", "--lines", type=line_count, action=Value, default=50, help="how many lines (default 50)"
    )
    parser.add_argument("--json", action="store_true", help="print {name, log_path, lines} (not with -f)")


def run(args: argparse.Namespace) -> int:
    try:
        session = connect(args.words, command="logs", starts=False)
    except CommandError as exc:
        return exc.code
    if len(session.names) != 1:
        print("vtui logs: name exactly one instance", file=sys.stderr)
        return 2
    if args.lines < 0:
        print("vtui logs: -n must be 0 or more", file=sys.stderr)
        return 2
    name = session.names[0]
    from vtui.supervisor.logfile import LogTailer

    try:
        answer = session.client.get(f"/logs?name={quote(name)}&n=0")  # where the log is, first
    except (ServiceError, ServiceUnavailable) as exc:
        print(f"vtui logs: {exc}", file=sys.stderr)
        return 1
    path = answer.get("log_path")
    tailer = LogTailer(path) if args.follow and path else None  # opened before the tail: nothing lost
    try:
        answer = session.client.get(f"/logs?name={quote(name)}&n={args.lines}")
    except (ServiceError, ServiceUnavailable) as exc:
        print(f"vtui logs: {exc}", file=sys.stderr)
        return 1
    lines = answer.get("lines", [])
    if args.json and not args.follow:
        print_json(answer)
        return 0
    if not lines and not args.follow and not (path and Path(path).exists()):
        print(f"vtui logs: {name} has no log yet ({path})", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    sys.stdout.flush()
    if tailer is None:
        return 0
    try:
        while True:
            for line in tailer.read():
                print(line)
            sys.stdout.flush()
            time.sleep(0.25)
    except KeyboardInterrupt:
        return 0
    finally:
        tailer.close()
