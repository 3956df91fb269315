"""`vtui down [LAYOUT] [NAME…]`: stop instances (SIGTERM, grace, SIGKILL of the group, sweep of
orphans) — including ones a previous vtui started and ones the layout no longer lists."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from vtui.commands._input import Value, seconds
from vtui.commands._runs import load_session, progress_printer, record_handle, run_async
from vtui.core.launcher import OsLauncher
from vtui.core.runstate import RunStore, spec_from_dict
from vtui.core.supervisor import Supervisor

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
            handle = record_handle(record)
            with contextlib.suppress(KeyError, TypeError, ValueError):  # a record too old to say
                handle.serves(spec_from_dict(record.spec))
            # stop() signals only processes proven this record's (create time, marker): a recycled pid
            # or process group in an old record is left alone.
            report = await asyncio.to_thread(launcher.stop, handle)
            store.remove(record.session, record.name)
            cut = f"; {report.cut_text()}" if report.cut_text() else ""
            print(f"{record.name}: stopped (not in the layout any more; killed {list(report.killed)}){cut}")
    print(f"session {layout.session.name}: {len(names) or len(layout.names())} instance(s) down")
    return 0
