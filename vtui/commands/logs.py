"""`vtui logs [LAYOUT] NAME [-f] [-n N]`: the last lines of an instance's log (across rotated files);
`-f` follows it, across rotations and restarts, until Ctrl-C."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from vtui.commands._input import Value, line_count
from vtui.commands._runs import CommandError, load_session
from vtui.core.logfile import LogTailer, read_tail
from vtui.core.runstate import RunStore
from vtui.core.supervisor import log_path_for

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


def run(args: argparse.Namespace) -> int:
    try:
        layout, names = load_session(args.words, starts=False)
    except CommandError as exc:
        return exc.code
    if len(names) != 1:
        print("vtui logs: name exactly one instance", file=sys.stderr)
        return 2
    name = names[0]
    record = RunStore().load(layout.session.name, name)
    path = Path(record.log_path) if record else log_path_for(layout.session.name, name)
    if not path.exists() and not args.follow:
        print(f"vtui logs: {name} has no log yet ({path})", file=sys.stderr)
        return 1
    tailer = LogTailer(path)  # opened before reading the tail: nothing written in between is lost
    for line in read_tail(path, args.lines) if path.exists() else []:
        print(line)
    sys.stdout.flush()
    if not args.follow:
        tailer.close()
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
