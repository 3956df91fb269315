"""`vtui up [LAYOUT] [--only NAME…] [--watch] [--force] [--json]`: have the session supervisor (started on demand,
detached: it outlives this command and the terminal) run the layout and start its instances (preflight
first), show progress, return when all are READY or failed — non-zero with the root-cause line when any
failed. The supervisor keeps applying the restart policy after `up` returns; `--watch` follows its feed
until Ctrl-C (instances keep running), and when the supervisor goes away (kill -9) starts a new one,
which re-adopts the instances, and follows that."""

from __future__ import annotations

import argparse
import sys
import time

from vtui.commands._input import Value, seconds
from vtui.commands._runs import (
    CommandError,
    FeedFollower,
    ServiceClient,
    ServiceError,
    ServiceUnavailable,
    base_url_of,
    connect,
    ensure_supervisor,
    follow_feed,
    print_json,
    progress_printer,
    row_of,
)

REATTACH_FIRST, REATTACH_MAX = 0.5, 5.0  # seconds between tries to reach a new supervisor (--watch)
HELP = "start the instances of a layout and wait until they are ready (--watch: follow the supervisor)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "layout", nargs="?", help="layout file or shipped name, e.g. demo (default: the session last used)"
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="start only these instances")
    parser.add_argument("--watch", action="store_true", help="follow the supervisor's events until Ctrl-C")
    parser.add_argument(
        "--timeout",
        type=seconds,
        action=Value,
        default=None,
        help="give up waiting after this many seconds (instances keep starting)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="start even where the GPU memory check finds too little free memory (names the holders)",
    )
    parser.add_argument("--json", action="store_true", help="print the instances' rows as JSON")


def run(args: argparse.Namespace) -> int:
    try:
        session = connect([args.layout] if args.layout else [], command="up", reload=True, layout_only=True)
    except CommandError as exc:
        return exc.code
    only = args.only
    known = session.instance_names()
    if only:
        unknown = [n for n in only if n not in known]
        if unknown:
            print(
                f"vtui up: no instance named {', '.join(unknown)} (instances: {', '.join(known)})",
                file=sys.stderr,
            )
            return 2
    follower = None if args.json else follow_feed(session.client, progress_printer())
    try:
        try:
            session.client.post("/start", {"names": only, "force": args.force}, timeout=None)
        except ServiceError as exc:
            if exc.status != 409:
                raise
            for line in exc.problems:
                print(f"vtui up: {line}", file=sys.stderr)
            running = [i["name"] for i in session.status(refresh=True)["instances"] if i.get("pid")]
            print(
                f"vtui up: {'only ' + ', '.join(running) + ' running' if running else 'nothing was started'}",
                file=sys.stderr,
            )
            if running:  # still return when those are READY or failed, as a plain `up` does
                states = session.client.post(
                    "/wait", {"names": running, "timeout": args.timeout}, timeout=None
                )
                _settle(follower, states["states"])
                _report(session, states["states"], args.json)
            return 1
        states = session.client.post("/wait", {"names": only, "timeout": args.timeout}, timeout=None)
        _settle(follower, states["states"])
        code = _report(session, states["states"], args.json)
        if args.watch:
            print("following the session supervisor; Ctrl-C to leave (instances keep running)", flush=True)
            printer = progress_printer()
            if follower is None:
                follower = follow_feed(session.client, printer)
            while True:  # until Ctrl-C: a supervisor that ends (kill -9, a crash) is started again
                follower.ended.wait()
                follower = _reattach(session, printer)
        return code
    except KeyboardInterrupt:
        print("vtui up: interrupted; instances keep running (`vtui down` stops them)", file=sys.stderr)
        return 130
    except (ServiceError, ServiceUnavailable) as exc:
        print(f"vtui up: {exc}", file=sys.stderr)
        return 1
    finally:
        if follower is not None:  # no progress line after the command is done
            follower.stop()


def _settle(follower: FeedFollower | None, states: dict[str, str]) -> None:
    """The progress lines up to the states `/wait` reported, printed before the summary."""
    if follower is not None:
        follower.settle(states)


def _reattach(session, printer) -> FeedFollower:
    """The session's supervisor again (started on demand, as any command does: it re-adopts the
    instances and applies the restart policy again), retried with backoff; its feed followed."""
    print("vtui up: the session supervisor went away; reconnecting", file=sys.stderr, flush=True)
    path = session.layout.path if session.layout is not None else None
    delay = REATTACH_FIRST
    while True:
        time.sleep(delay)
        try:
            if path is not None:
                client, _ = ensure_supervisor(session.name, path)
            else:
                client = ServiceClient(session.name)
            follower = follow_feed(client, printer)
            status = client.get("/status")
        except (ServiceError, ServiceUnavailable, OSError) as exc:
            print(f"vtui up: {exc}; retrying in {delay:g} s", file=sys.stderr, flush=True)
            delay = min(REATTACH_MAX, delay * 2)
            continue
        if follower.ended.is_set():  # gone again before the first line
            continue
        session.client = client
        states = ", ".join(f"{i['name']} {i['state']}" for i in status.get("instances") or [])
        print(
            f"reattached to the session supervisor (pid {status.get('supervisor_pid')}): {states}", flush=True
        )
        return follower


def _report(session, states: dict[str, str], as_json: bool) -> int:
    status = session.status(refresh=True)
    rows = [row_of(i, status["supervisor_pid"]) for i in status["instances"] if i["name"] in states]
    bad = sum(1 for n, s in states.items() if s != "ready")
    if as_json:
        print_json(rows)
        return 1 if bad else 0
    for inst in status["instances"]:
        name = inst["name"]
        if name not in states:
            continue
        if states[name] == "ready":
            who = f"pid {inst['pid']}" if inst.get("pid") else "attached: watched, never started by vtui"
            print(f"{name}: ready on {base_url_of(inst['spec'])} ({who})")
        else:
            reason = inst.get("last_error") or "no error line found; see `vtui logs " + name + "`"
            print(f"{name}: {states[name]}: {reason}", file=sys.stderr)
    return 1 if bad else 0
