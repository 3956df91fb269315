"""`vtui down [LAYOUT] [NAME…] [--json]`: stop instances (SIGTERM, grace, SIGKILL of the group, sweep of
orphans) through the session supervisor — including ones a previous vtui started and ones the layout
no longer lists. Returns once no process of any of their trees is alive. Works from a running
supervisor even when the layout file was moved, edited into an invalid state or deleted. Attached servers
(engine = "external") are left running, and said so: vtui only watches them."""

from __future__ import annotations

import argparse
import sys

from vtui.commands._input import Value, seconds
from vtui.commands._runs import CommandError, ServiceError, ServiceUnavailable, connect, print_json

HELP = "stop instances of a layout (all, or the names given) and every process they started"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "words",
        nargs="*",
        metavar="[LAYOUT] NAME",
        help="layout file (default: the session last used), then instance names",
    )
    parser.add_argument(
        "--grace",
        type=seconds,
        action=Value,
        default=None,
        help="seconds to wait for requests in flight to finish, then again after SIGTERM before SIGKILL",
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as a JSON object")


def run(args: argparse.Namespace) -> int:
    try:
        session = connect(args.words, command="down", starts=False)
    except CommandError as exc:
        return exc.code
    body = {"names": session.names or None, "grace": args.grace}
    try:
        answer = session.client.post("/stop", body, timeout=None)
    except KeyboardInterrupt:
        print("vtui down: interrupted; the supervisor finishes the stop", file=sys.stderr)
        return 130
    except (ServiceError, ServiceUnavailable) as exc:
        print(f"vtui down: {exc}", file=sys.stderr)
        return 1
    stopped, leftovers = answer.get("stopped", []), answer.get("leftovers", [])
    notices = answer.get("notices", [])
    attached = answer.get("attached") or {}  # name -> URL: watched, never stopped
    if args.json:
        print_json(
            {
                "session": session.name,
                "stopped": stopped,
                "leftovers": leftovers,
                "notices": notices,
                "left_running": attached,
            }
        )
    else:
        for text in notices:  # the requests in flight: ended or cut; trees that needed SIGKILL
            print(text)
        for name in stopped:
            print(f"{name}: stopped")
        for name, url in attached.items():
            print(f'{name}: left running (engine = "external", {url}: vtui watches it, never stops it)')
        if leftovers:
            print(f"vtui down: killed processes that outlived the stop: {leftovers}", file=sys.stderr)
        print(f"session {session.name}: {len(stopped)} instance(s) down")
    return 0
