"""Shared plumbing of the supervision commands (up, down, ps, logs, restart): layout resolution,
progress lines, and the instance table read from run records when no supervisor is running."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from vtui.core import logfile
from vtui.core.events import Event, Notice, PhaseChanged, StateChanged
from vtui.core.launcher import OsLauncher, ProcessHandle, exit_path_for
from vtui.core.model import InstanceSpec, Layout
from vtui.core.runstate import RunRecord, RunStore, merge_flags, spec_from_dict
from vtui.core.state import State
from vtui.layouts import LayoutError, NoLayoutError, load_layout, remember_last, split_layout_args


class CommandError(Exception):
    """A user-facing failure: already printed; carries the exit code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def load_session(words: Iterable[str], *, starts: bool = True) -> tuple[Layout, list[str]]:
    """`[LAYOUT] NAME…` -> (layout, names); prints the problems and raises CommandError(2) when unusable.
    `starts=False` (down, ps, logs: stopping and listing never need a secret): an unset `${VAR}` is no
    problem; `up`, `restart` and `check` still report it."""
    try:
        path, names = split_layout_args(words)
        layout = load_layout(path, unset_ok=not starts)
    except NoLayoutError as exc:
        print(f"vtui: {exc.message}", file=sys.stderr)
        raise CommandError(2) from exc
    except LayoutError as exc:
        for problem in exc.problems:
            print(f"vtui: {problem}", file=sys.stderr)
        raise CommandError(2) from exc
    remember_last(path)
    unknown = [n for n in names if n not in layout.names()]
    if unknown:
        print(
            f"vtui: no instance named {', '.join(unknown)} in {path} "
            f"(instances: {', '.join(layout.names())})",
            file=sys.stderr,
        )
        raise CommandError(2)
    return layout, names


def progress_printer(started: float | None = None) -> Callable[[Event], None]:
    """Prints one line per lifecycle change, phase and notice (not log lines)."""
    t0 = started if started is not None else time.monotonic()

    def show(event: Event) -> None:
        stamp = f"{time.monotonic() - t0:6.1f}s"
        if isinstance(event, StateChanged):
            extra = f": {event.reason}" if event.reason else ""
            print(f"{stamp}  {event.instance}: {event.new.value}{extra}", flush=True)
        elif isinstance(event, PhaseChanged):
            print(f"{stamp}  {event.instance}: starting ({event.phase.value})", flush=True)
        elif isinstance(event, Notice):
            prefix = "" if event.level == "info" else f"{event.level}: "
            print(f"{stamp}  {prefix}{event.text}", flush=True)

    return show


def run_async(coro_factory: Callable[[asyncio.Event], Any]) -> int:
    """Run a command coroutine; Ctrl-C sets the event it is given (instead of a traceback)."""

    async def main() -> int:
        interrupted = asyncio.Event()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signal.SIGINT, interrupted.set)
            loop.add_signal_handler(signal.SIGTERM, interrupted.set)
        return int(await coro_factory(interrupted) or 0)

    try:
        return asyncio.run(main())
    except CommandError as exc:
        return exc.code


def record_handle(record: RunRecord) -> ProcessHandle:
    return ProcessHandle(
        pid=record.pid,
        create_time=record.create_time,
        pgid=record.pgid,
        sid=record.sid,
        key=record.key,
        log_path=Path(record.log_path),
        argv=tuple(record.argv),
        pump_pid=record.pump_pid,
        exit_path=exit_path_for(Path(record.log_path)),
    )


def exit_code_of(record: RunRecord) -> int | None:
    info = logfile.read_exit(exit_path_for(Path(record.log_path)))
    return info.returncode if info is not None else None


def instance_rows(
    layout: Layout, store: RunStore | None = None, launcher: OsLauncher | None = None
) -> list[dict[str, Any]]:
    """The state of every instance of the session from its run record, with no supervisor: alive and
    /health 200 -> ready, alive -> starting (or unhealthy once it was ready), dead -> what the record
    and the exit code say."""
    store = store or RunStore()
    launcher = launcher or OsLauncher(health_timeout=1.0)
    records = {r.name: r for r in store.all(layout.session.name)}
    names = layout.names() + [n for n in records if n not in layout.names()]
    rows = []
    for name in names:
        record = records.get(name)
        spec: InstanceSpec | None
        try:
            spec = layout.instance(name)
        except KeyError:
            spec = spec_from_dict(record.spec) if record else None
        if record is not None and spec is not None:
            spec = merge_flags(spec, record.flags)
        row: dict[str, Any] = {
            "name": name,
            "state": State.STOPPED.value,
            "pid": None,
            "port": spec.port if spec else None,
            "gpus": list(spec.gpus) if spec else [],
            "restarts": 0,
            "model": spec.model if spec else None,
            "engine": spec.engine if spec else None,
            "started_at": None,
            "uptime_s": None,
            "last_error": None,
            "log_path": None,
            "flags": dict(spec.flags) if spec else {},
            "in_layout": name in layout.names(),
        }
        if record is not None:
            row.update(
                restarts=record.restarts,
                last_error=record.last_error,
                log_path=record.log_path,
                port=record.port,
            )
            handle = launcher.find(
                pid=record.pid,
                create_time=record.create_time,
                argv=record.argv,
                key=record.key,
                log_path=Path(record.log_path),
                pump_pid=record.pump_pid,
            )
            if handle is not None:
                healthy = spec is not None and launcher.health_sync(spec)
                state = (
                    State.READY
                    if healthy
                    else (State.UNHEALTHY if record.last_state in ("ready", "unhealthy") else State.STARTING)
                )
                row.update(
                    state=state.value,
                    pid=record.pid,
                    started_at=record.started_at,
                    uptime_s=round(time.time() - record.started_at, 1),
                )
            else:
                code = exit_code_of(record)
                if record.last_state in ("backoff", "failed", "crashed"):
                    row["state"] = record.last_state
                else:
                    row["state"] = State.STOPPED.value if code == 0 else State.CRASHED.value
                if code not in (None, 0) and not row["last_error"]:
                    row["last_error"] = f"exited with code {code}"
        rows.append(row)
    return rows
