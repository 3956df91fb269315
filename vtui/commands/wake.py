"""`vtui wake [LAYOUT] NAME [--json]`: wake an instance `vtui sleep` (or `idle_sleep_after`) put to sleep;
returns once it is READY again. Exit codes: 0 READY, 1 refused or failed (the reason printed), 2 bad
arguments or layout."""

from __future__ import annotations

import argparse

from vtui.commands.sleep import sleep_or_wake

HELP = "wake an instance put to sleep (vLLM /wake_up); returns once it is READY"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "words",
        nargs="+",
        metavar="[LAYOUT] NAME",
        help="layout file (default: the session last used), then the instance name",
    )
    parser.add_argument("--json", action="store_true", help="print the instance's row as a JSON object")


def run(args: argparse.Namespace) -> int:
    return sleep_or_wake(args, "wake")
