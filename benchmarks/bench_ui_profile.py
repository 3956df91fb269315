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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("args", nargs=argparse.REMAINDER, help="vtui's arguments (after --)")
    args = parser.parse_args()
    vtui_args = [a for a in args.args if a != "--"]

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


if __name__ == "__main__":
    raise SystemExit(main())
