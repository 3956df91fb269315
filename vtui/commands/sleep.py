"""`vtui sleep [LAYOUT] NAME [--level 1|2] [--json]`: put one instance into vLLM's sleep mode through the
session supervisor (level 1: weights offloaded to CPU memory and the KV cache freed; level 2: both
freed). The process stays up and keeps its port; `vtui wake NAME` brings it back. Needs
`sleep_mode = true` on the instance (the engine must start with VLLM_SERVER_DEV_MODE=1) and a loopback
bind. Exit codes: 0 done, 1 refused or failed (the reason printed), 2 bad arguments or layout, or an
attached server (engine = "external": vtui only watches it)."""

from __future__ import annotations

import argparse
import sys

from vtui.commands._runs import (
    CommandError,
    ServiceError,
    ServiceUnavailable,
    connect,
    print_json,
    refuse_attached,
    row_of,
)

HELP = "put one instance to sleep (vLLM sleep mode: its GPU memory freed, the process kept)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "words",
        nargs="+",
        metavar="[LAYOUT] NAME",
        help="layout file (default: the session last used), then the instance name",
    )
    parser.add_argument(
        "--level",
        type=int,
        choices=(1, 2),
        default=1,
        help="1: offload weights to CPU, free the KV cache (default); 2: free both",
    )
    parser.add_argument("--json", action="store_true", help="print the instance's row as a JSON object")


def run(args: argparse.Namespace) -> int:
    return sleep_or_wake(args, "sleep")


def sleep_or_wake(args: argparse.Namespace, verb: str) -> int:
    """`vtui sleep` / `vtui wake`: one instance, through the session supervisor's /sleep or /wake."""
    try:
        session = connect(args.words, command=verb, starts=False)
    except CommandError as exc:
        return exc.code
    if len(session.names) != 1:
        print(f"vtui {verb}: name exactly one instance", file=sys.stderr)
        return 2
    name = session.names[0]
    if refuse_attached(session, name, verb, "put to sleep or wake"):
        return 2
    body: dict = {"name": name}
    if verb == "sleep":
        body["level"] = args.level
    try:
        session.client.post(f"/{verb}", body, timeout=None)
        status = session.status(refresh=True)
    except KeyboardInterrupt:
        print(f"vtui {verb}: interrupted", file=sys.stderr)
        return 130
    except ServiceError as exc:
        for problem in exc.problems:
            print(f"vtui {verb}: {problem}", file=sys.stderr)
        return 1
    except ServiceUnavailable as exc:
        print(f"vtui {verb}: {exc}", file=sys.stderr)
        return 1
    inst = next(i for i in status["instances"] if i["name"] == name)
    if args.json:
        print_json(row_of(inst, status["supervisor_pid"]))
    else:
        print(f"{name}: {inst['state']}")
    return 0
