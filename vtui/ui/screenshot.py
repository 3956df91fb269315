"""`python -m vtui.ui.screenshot [LAYOUT] [OUT.svg]`: the README's dashboard screenshot, taken from the
real app on a layout of simulated instances (real Supervisor, sim processes, scrapes).

No GPU is needed: without an NVIDIA driver the app's own GPU sampler shows the simulated GPUs that
the sim instances hold memory on (vtui.sim.gpuview); utilization, temperature and power are
unknown there and show as `--`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from vtui.core.state import State
from vtui.ui.app import DEMO_LAYOUT, make_app


async def take(
    layout_path: Path, out: Path, size: tuple[int, int] = (140, 42), settle_s: float = 12.0
) -> Path:
    app = make_app(layout_path)
    async with app.run_test(size=size) as pilot:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            views = app.store.views.values()
            if views and all(v.state == State.READY and v.sample is not None for v in views):
                break
            await asyncio.sleep(0.25)
        await asyncio.sleep(settle_s)  # some history for the sparklines
        await pilot.pause()
        out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(filename=out.name, path=str(out.parent))
        await app.bridge.close(stop_instances=True)
    return out


def main(argv: list[str]) -> int:
    layout = Path(argv[0]) if argv else DEMO_LAYOUT
    out = Path(argv[1]) if len(argv) > 1 else Path("docs/screenshot.svg")
    print(asyncio.run(take(layout, out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
