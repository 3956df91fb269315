"""`vtui down [LAYOUT] [NAME…]`: stop instances (SIGTERM, grace, SIGKILL of the group, sweep of
orphans) — including ones a previous vtui started and ones the layout no longer lists."""

from __future__ import annotations

import argparse
import asyncio

from vtui.commands._runs import load_session, progress_printer, record_handle, run_async
from vtui.core.launcher import OsLauncher
from vtui.core.runstate import RunStore
from vtui.core.supervisor import Supervisor

HELP = "stop instances of a layout (all, or the names given) and every process they started"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "words",
        nargs="*",
        metavar="[LAYOUT] NAME",
        help="layout file (default: the session last used), then instance names",
    )
    parser.add_argument("--grace", type=float, default=None, help="seconds between SIGTERM and SIGKILL")


def run(args: argparse.Namespace) -> int:
    return run_async(lambda interrupted: _down(args))


async def _down(args: argparse.Namespace) -> int:
    layout, names = load_session(args.words, starts=False)
    launcher = OsLauncher() if args.grace is None else OsLauncher(grace=args.grace)
    sup = Supervisor(layout, launcher=launcher, check_preflight=False)
    sup.subscribe(progress_printer())
    await sup.stop(names or None)
    await sup.close()
    if not names:  # records of instances the layout no longer names
        store = RunStore()
        for record in store.all(layout.session.name):
            if record.name in layout.names():
                continue
            report = await asyncio.to_thread(launcher.stop, record_handle(record))
            store.remove(record.session, record.name)
            print(f"{record.name}: stopped (not in the layout any more; killed {list(report.killed)})")
    print(f"session {layout.session.name}: {len(names) or len(layout.names())} instance(s) down")
    return 0
