"""`vtui ARGS` (the dashboard, as `python -m vtui` runs it) under cProfile: the main thread's steady
state from `--warmup` seconds after the app mounts, for `--seconds`, written to `--out`, then exits.
What bench_ui_vs_htop.py runs in tmux with `--profile`, to see where a refresh on a real session
supervisor goes:

    python benchmarks/bench_ui_profile.py --out /tmp/ui.prof -- layout.toml --no-start
    python -c "import pstats; pstats.Stats('/tmp/ui.prof').sort_stats('cumtime').print_stats(60)"
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import _smoke


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=not _smoke.on())
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("args", nargs=argparse.REMAINDER, help="vtui's arguments (after --)")
    _smoke.tiny(parser, warmup=0.5, seconds=0.5)
    args = parser.parse_args()
    vtui_args = [a for a in args.args if a != "--"]
    if _smoke.on() and not vtui_args:
        return smoke(args.out)

    from vtui.ui import app as app_module

    prof = cProfile.Profile()
    mounted = app_module.VtuiApp.on_mount

    def on_mount(self: app_module.VtuiApp) -> None:
        mounted(self)
        loop = asyncio.get_running_loop()

        def done() -> None:
            prof.disable()
            prof.dump_stats(args.out)
            os._exit(0)  # no teardown: the supervisor and its instances keep running

        loop.call_later(args.warmup, prof.enable)
        loop.call_later(args.warmup + args.seconds, done)

    app_module.VtuiApp.on_mount = on_mount  # type: ignore[method-assign]
    return app_module.run_tui(vtui_args)


def smoke(out: str | None) -> int:
    """A smoke run: this script (in a child: it ends with os._exit) on the dashboard of a one-sim session
    of its own; it succeeded when the child wrote its profile."""
    with _smoke.sim_session() as (_, layout):
        prof = Path(out) if out else Path(tempfile.mkdtemp(prefix="vtui-bench-profile-")) / "ui.prof"
        argv = [sys.executable, __file__, "--out", str(prof), "--", str(layout), "--no-start"]
        code = subprocess.run(argv, stdin=subprocess.DEVNULL, timeout=120).returncode
    print(f"smoke: profile {'written to ' + str(prof) if prof.exists() else 'missing'}")
    return code or (0 if prof.exists() else 1)


if __name__ == "__main__":
    raise SystemExit(main())
