"""`vtui sessions [--json]`: the session supervisors running on this machine (for this user's state
dir): session, pid, socket, layout file. `vtui --host user@gpu2` runs `vtui sessions --json` over
ssh to find the sockets it forwards. Stdlib only, and never starts a supervisor.

`vtui sessions install-unit [LAYOUT]` / `remove-unit [LAYOUT]`: a systemd user unit that keeps the
session's supervisor itself running (vtui.commands._unit, imported only for them)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vtui.service import locations
from vtui.service.client import ServiceClient

HELP = "list the session supervisors running on this machine (--json: with their sockets, for --host)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")
    sub = parser.add_subparsers(dest="action", metavar="{install-unit,remove-unit}")
    from vtui.commands import _unit

    _unit.add_arguments(sub)


def live_sessions() -> list[dict]:
    """Each registered supervisor whose socket answers (a dead one's registration is skipped)."""
    found = []
    for info in locations.registrations():
        socket = info.get("socket") or str(locations.socket_path(info["session"]))
        client = ServiceClient(info["session"], socket_file=Path(socket))
        if client.alive():
            found.append(
                {
                    "session": info["session"],
                    "pid": info.get("pid"),
                    "socket": socket,
                    "layout_path": info.get("layout_path"),
                    "started_at": info.get("started_at"),
                }
            )
    return found


def run(args: argparse.Namespace) -> int:
    if getattr(args, "action", None):
        from vtui.commands import _unit

        return _unit.run(args)
    sessions = live_sessions()
    if args.json:
        print(json.dumps(sessions, indent=2))
        return 0
    if not sessions:
        print("no session supervisor runs here")
        return 0
    width = max(len("SESSION"), *(len(s["session"]) for s in sessions))
    print(f"{'SESSION':<{width}} {'PID':>7}  LAYOUT")
    for s in sessions:
        print(f"{s['session']:<{width}} {s['pid'] or '-':>7}  {s['layout_path'] or '-'}")
    return 0
