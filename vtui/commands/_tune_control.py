"""`vtui tune`'s process control: `--detach` (the same tune in its own session), the signals that
abort like Ctrl-C, the one-tune-per-instance lock, and putting the original flags back (`--restore`,
and after an abort, through a new supervisor when the old one was killed)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from vtui.commands._tune_setup import NOT_RESUMED, TuneSetup, bench_config
from vtui.core.selfrun import module_argv
from vtui.tune import progress

# (dest, option) of the settings a detached tune is started with (its command line rebuilt)
VALUE_OPTIONS = (
    ("ttft_p95_ms", "--ttft-p95-ms"),
    ("itl_p95_ms", "--itl-p95-ms"),
    ("input_len", "--input-len"),
    ("output_len", "--output-len"),
    ("concurrency", "--concurrency"),
    ("request_rate", "--request-rate"),
    ("context", "--context"),
    ("num_requests", "--num-requests"),
    ("warmup", "--warmup"),
    ("objective", "--objective"),
    ("max_trials", "--max-trials"),
)
SWITCHES = (("allow_quality_trade", "--allow-quality-trade"), ("save", "--save"), ("resume", "--resume"))


def options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of a tune, as recorded for a resume."""
    return {k: v for k, v in vars(args).items() if k not in NOT_RESUMED and not callable(v)}


def child_argv(args: argparse.Namespace, words: list[str]) -> list[str]:
    """The command line of the detached tune: the same settings, without --detach."""
    argv = module_argv("vtui", "tune", *words)
    for dest, option in VALUE_OPTIONS:
        value = getattr(args, dest, None)
        if value is not None:
            argv += [option, str(value)]
    for fix in args.fix or []:
        argv += ["--fix", fix]
    argv += [option for dest, option in SWITCHES if getattr(args, dest, False)]
    return argv


def detach(setup: TuneSetup, args: argparse.Namespace) -> int:
    """Start the tune in its own session (no terminal: an SSH drop or the dashboard closing does not
    reach it), its output in its log; return once it has written its progress file."""
    import os
    import subprocess

    from vtui.commands._runs import print_json

    words = [setup.layout_path, setup.name] if setup.layout_path else list(args.words)
    log = progress.log_path(setup.session.name, setup.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        os.chmod(log, 0o600)
        proc = subprocess.Popen(
            child_argv(args, words),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        doc = progress.read(setup.progress_file)
        if doc is not None and doc.get("pid") == proc.pid:
            info = {"pid": proc.pid, "progress": str(setup.progress_file), "log": str(log)}
            if args.json:
                print_json(info)
            else:
                print(f"tune of {setup.name} running detached (pid {proc.pid})")
                print(f"progress: {setup.progress_file}\nlog: {log}")
            return 0
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-5:]
            print(
                f"vtui tune: the detached tune exited ({proc.returncode}): " + " | ".join(tail),
                file=sys.stderr,
            )
            return proc.returncode or 1
        time.sleep(0.1)
    print(
        f"vtui tune: the detached tune (pid {proc.pid}) wrote no progress in 60 s; see {log}", file=sys.stderr
    )
    return 1


class _Abort(KeyboardInterrupt):
    """SIGTERM (`T`'s abort, `kill`) or SIGHUP: stop like Ctrl-C, putting the original flags back."""


def abort_on_signals(detached: bool) -> None:
    import signal

    def handler(signum: int, frame: object) -> None:
        raise _Abort(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, signal.SIG_IGN if detached else handler)


def restore_only(setup: TuneSetup, args: argparse.Namespace) -> int:
    from vtui.tune.runner import SupervisorRunner

    doc = dict(setup.previous or {})
    runner = SupervisorRunner(setup.session.client, setup.name, bench_config(setup, args), defaults={})
    runner.apply(setup.original, exact=True)
    doc.update(state="aborted", message="original flags restored (--restore)", current=None)
    progress.write(setup.progress_file, doc)
    print(f"{setup.name}: running with its original flags again", file=sys.stderr)
    return 0


def tune_lock(setup: TuneSetup):
    """One tune per instance: an exclusive lock held for the tune's life (two starts racing, as two
    quick ctrl+r in the dashboard, leave one running). None when another tune holds it."""
    import fcntl

    setup.progress_file.parent.mkdir(parents=True, exist_ok=True)
    handle = open(setup.progress_file.with_suffix(".lock"), "a")  # held until exit
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


class _Reconnecting:
    """The supervisor's client for putting flags back: when the supervisor is gone (killed), the next
    call starts a new one for the layout (it re-adopts the instances) and asks again."""

    def __init__(self, client, session: str, layout_path: str | None) -> None:
        self.client, self.session, self.layout_path = client, session, layout_path

    def _call(self, method: str, *a: Any, **kw: Any) -> dict[str, Any]:
        from vtui.service.client import ServiceUnavailable, ensure_supervisor

        try:
            return getattr(self.client, method)(*a, **kw)
        except ServiceUnavailable:
            if not self.layout_path:
                raise
            self.client, _ = ensure_supervisor(self.session, self.layout_path)
            return getattr(self.client, method)(*a, **kw)

    def get(self, target: str, **kw: Any) -> dict[str, Any]:
        return self._call("get", target, **kw)

    def post(self, target: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return self._call("post", target, body, **kw)


def restore(runner, setup: TuneSetup, exc: BaseException) -> bool:
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut the restore short
        signal.signal(sig, signal.SIG_IGN)
    reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
    print(f"vtui tune: {reason}; putting the original flags back", file=sys.stderr)
    runner.client = _Reconnecting(runner.client, setup.session.name, setup.layout_path)
    try:
        runner.apply(setup.original, exact=True)
        print(f"{setup.name}: running with its original flags again", file=sys.stderr)
        return True
    except BaseException as again:  # noqa: BLE001 — report, never hide the first error
        print(f"vtui tune: could not restore {setup.name}'s flags: {again}", file=sys.stderr)
        return False
