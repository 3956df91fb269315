"""`vtui up [LAYOUT] [--only NAME…] [--watch]`: start a session's instances (preflight first), show
progress, return when all are READY or failed — non-zero with the root-cause line when any failed.
`--watch` keeps supervising (health, restart policy) until Ctrl-C; instances keep running after it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from vtui.commands._runs import load_session, progress_printer, run_async
from vtui.core.preflight import PreflightError
from vtui.core.state import State
from vtui.core.supervisor import Supervisor

HELP = "start the instances of a layout and wait until they are ready (--watch: keep supervising)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "layout", nargs="?", help="layout file or shipped name, e.g. demo (default: the session last used)"
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="start only these instances")
    parser.add_argument(
        "--watch", action="store_true", help="keep supervising with the restart policy until Ctrl-C"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="give up waiting after this many seconds (instances keep starting)",
    )


def run(args: argparse.Namespace) -> int:
    return run_async(lambda interrupted: _up(args, interrupted))


async def _up(args: argparse.Namespace, interrupted: asyncio.Event) -> int:
    layout, _ = load_session([args.layout] if args.layout else [])
    only = args.only
    if only:
        unknown = [n for n in only if n not in layout.names()]
        if unknown:
            print(
                f"vtui up: no instance named {', '.join(unknown)} (instances: {', '.join(layout.names())})",
                file=sys.stderr,
            )
            return 2
    sup = Supervisor(layout)
    sup.subscribe(progress_printer())
    stop_waiting = asyncio.ensure_future(interrupted.wait())
    try:
        try:
            await sup.start(only)
        except PreflightError as exc:
            for line in exc.problems:
                print(f"vtui up: {line}", file=sys.stderr)
            print("vtui up: nothing was started", file=sys.stderr)
            return 1
        settle = asyncio.ensure_future(sup.wait_settled(only, timeout=args.timeout))
        await asyncio.wait({settle, stop_waiting}, return_when=asyncio.FIRST_COMPLETED)
        if not settle.done():
            settle.cancel()
            print("vtui up: interrupted; instances keep running (`vtui down` stops them)", file=sys.stderr)
            return 130
        states = settle.result()
        code = _report(sup, states)
        if args.watch and not interrupted.is_set():
            print("supervising; Ctrl-C to leave (instances keep running)", flush=True)
            run_task = asyncio.ensure_future(sup.run())
            await asyncio.wait({run_task, stop_waiting}, return_when=asyncio.FIRST_COMPLETED)
            code = 0 if all(s.state is State.READY for s in sup.status() if not only or s.name in only) else 1
        return code
    finally:
        stop_waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stop_waiting
        await sup.close()


def _report(sup: Supervisor, states: dict[str, State]) -> int:
    bad = 0
    for status in sup.status():
        if status.name not in states:
            continue
        state = states[status.name]
        if state is State.READY:
            print(f"{status.name}: ready on {status.spec.base_url} (pid {status.pid})")
        else:
            bad += 1
            reason = status.last_error or "no error line found; see `vtui logs " + status.name + "`"
            print(f"{status.name}: {state.value}: {reason}", file=sys.stderr)
    return 1 if bad else 0
