"""`python -m vtui.ui.screenshot [LAYOUT] [OUT.svg]`: the README's dashboard screenshot, taken from the
real app on a layout of simulated instances (real Supervisor, sim processes, scrapes).

No GPU is needed: for sim layouts the GPU panel is fed the simulated box the sims model
(`session.gpu_memory_gib` per GPU, each instance holding gpu-memory-utilization of its GPUs).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

from vtui.core.model import Layout
from vtui.core.state import State
from vtui.ui.adapters import GpuInfo, GpuProcess, GpuSample
from vtui.ui.app import DEMO_LAYOUT, make_app, resolve_layout

GIB = 2**30


def simulated_gpus(layout: Layout, pid_owner) -> GpuSample:
    per_gpu = int((layout.session.gpu_memory_gib or 80) * GIB)
    indices = sorted({g for s in layout.instances for g in s.gpus}) or [0]
    count = max(8, max(indices) + 1)
    owners = {name: pid for pid, name in pid_owner().items()}
    procs, used = [], dict.fromkeys(range(count), int(0.6 * GIB))
    for spec in layout.instances:
        if spec.name not in owners:
            continue
        util = float(spec.flags.get("gpu-memory-utilization", 0.9))
        for g in spec.gpus:
            mem = int(util * per_gpu)
            used[g] += mem
            procs.append(GpuProcess(g, owners[spec.name], mem, spec.name))
    gpus = tuple(GpuInfo(i, "NVIDIA H100 80GB (sim)", min(used[i], per_gpu), per_gpu,
                         70.0 if used[i] > GIB else 0.0, 58.0 if used[i] > GIB else 31.0,
                         520.0 if used[i] > GIB else 70.0, 700.0) for i in range(count))
    return GpuSample(True, None, gpus, tuple(procs), time.time())


class SimGpuSampler:
    def __init__(self, layout: Layout, on_sample, pid_owner) -> None:
        self.layout, self.on_sample, self.pid_owner = layout, on_sample, pid_owner
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="sim-gpu").start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.on_sample(simulated_gpus(self.layout, self.pid_owner))

    def stop(self) -> None:
        self._stop.set()


async def take(layout_path: Path, out: Path, size: tuple[int, int] = (140, 42), settle_s: float = 12.0) -> Path:
    layout = resolve_layout(layout_path)
    app = make_app(layout_path, gpu_sampler=lambda on, owner: SimGpuSampler(layout, on, owner))
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
