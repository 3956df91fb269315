"""`vtui handover SESSION [--layout FILE]`: replace a session's supervisor with one of this vtui, the
instances left running: the old supervisor (of any version) is asked to end supervision only, and a new
one started on its layout file re-adopts what runs. What a client says when it meets a supervisor of
another version names this command (`service.api.handover_command`)."""

from __future__ import annotations

import argparse
import sys

from vtui.service.client import ServiceError, ServiceUnavailable, handover

HELP = "replace a session's supervisor with this vtui's, without stopping its instances"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session's name (`vtui sessions` lists them)")
    parser.add_argument(
        "--layout",
        metavar="FILE",
        default=None,
        help="the layout file the new supervisor runs (default: the old one's)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        old, client = handover(args.session, args.layout)
        status = client.get("/status")
    except (ServiceError, ServiceUnavailable) as exc:
        print(f"vtui handover: {exc}", file=sys.stderr)
        return 1
    was = f"vtui {old.get('vtui_version') or '(unversioned)'}, API {old.get('api_version', 0)}"
    now = f"vtui {status.get('vtui_version')}, API {status.get('api_version')}"
    print(
        f"session {args.session}: supervisor {old.get('supervisor_pid')} ({was}) replaced by "
        f"{status.get('supervisor_pid')} ({now})"
    )
    for inst in status.get("instances") or []:
        kept = " (re-adopted)" if inst.get("adopted") else ""
        print(f"  {inst['name']}: {inst['state']}{kept}")
    return 0
