"""`python -m vtui.service --layout FILE`: run the session supervisor of FILE's session (normally
started on demand, detached, by `vtui.service.client.ensure_supervisor`).

Takes the session's lock first (fcntl, on a file in the state dir): while one supervisor holds it,
another start exits at once with status 0, so two supervisors of one session cannot both run.
Environment: VTUI_SUPERVISOR_IDLE_S (idle seconds before exiting, 30), VTUI_SUPERVISOR_GPU=0 (no NVML
sampler), VTUI_SUPERVISOR_SCRAPE_S (seconds between /metrics scrapes, 1; 0: none).
Exit status: 0 ended (or another one runs), 2 the layout does not validate, 1 anything else.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import signal
import sys

from vtui.service import locations


def acquire_lock(session: str, wait: bool = False) -> int | None:
    """The session's lock, held for this process's life (None: another supervisor holds it; `wait`:
    block until it exits instead). The fd is not inherited by the instances, so a killed supervisor's
    lock is released with it."""
    fd = os.open(locations.lock_path(session), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vtui.service", description="run a session supervisor")
    parser.add_argument("--layout", required=True, help="the layout file of the session")
    parser.add_argument(
        "--idle", type=float, default=None, help="seconds idle before exiting (default 30; inf: never)"
    )
    parser.add_argument(
        "--wait-lock",
        action="store_true",
        help="while another supervisor has the session, wait for it to exit and take over (a systemd unit)",
    )
    args = parser.parse_args(argv)

    from vtui.layouts import LayoutError, load_layout
    from vtui.service.server import SessionService
    from vtui.service.service_base import log
    from vtui.telemetry import flagschema

    try:
        # An unset ${VAR} does not keep the supervisor from listing and stopping (`vtui ps`/`down` may be
        # what starts it); an instance that needs one is refused at start until a command sends it.
        # flags the instances' own vLLMs have are accepted (their parsers, read once per version)
        flags = flagschema.layout_flags(args.layout)
        layout = load_layout(args.layout, unset_ok=True, flags=flags)
    except LayoutError as exc:
        for problem in exc.problems:
            log(f"{problem}")
        return 2
    except OSError as exc:
        log(f"{args.layout}: {exc.strerror or exc}")
        return 2
    session = layout.session.name
    lock = acquire_lock(session)
    if lock is None and args.wait_lock:
        log(f"session {session} has a supervisor: waiting for it to exit, then taking over")
        lock = acquire_lock(session, wait=True)
    if lock is None:
        log(f"session {session} already has a supervisor; exiting")
        return 0
    from vtui.core import paths
    from vtui.core.atomic import sweep_stale_temps_under

    for gone in sweep_stale_temps_under(paths.state_dir()):  # saves killed before their rename
        log(f"removed {gone.name}: the temp file of a save whose writer is gone")
    idle = args.idle if args.idle is not None else float(os.environ.get("VTUI_SUPERVISOR_IDLE_S", "30"))
    gpu = os.environ.get("VTUI_SUPERVISOR_GPU", "1") != "0"
    scrape_s = float(os.environ.get("VTUI_SUPERVISOR_SCRAPE_S", "1"))  # 0: no /metrics scrapes

    async def run() -> None:
        service = SessionService(
            layout,
            idle_grace=idle,
            gpu=gpu,
            scrape=scrape_s > 0,
            scrape_interval=scrape_s or 1.0,
            flags=flags,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(service.shutdown()))
        log(f"supervising session {session} ({args.layout}) on {service.socket_file}")
        await service.serve()
        log("idle or asked to end: exiting (instances keep running)")

    try:
        asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 — the log is the only place anyone will read this
        log(f"failed: {exc!r}")
        import traceback

        traceback.print_exc()
        return 1
    finally:
        os.close(lock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
