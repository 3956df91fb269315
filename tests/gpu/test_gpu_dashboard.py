"""On real GPUs, headless: vtui's dashboard with sim instances holding real CUDA memory, each GPU's memory
bar split by the instances on it; the screenshot (SVG) goes to $VTUI_GPU_ARTIFACTS."""

from __future__ import annotations

import time

import pytest

from vtui.core.state import State
from vtui.layouts.dump import dump_layout
from vtui.ui.app import make_app
from vtui.ui.textdump import screen_text

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(600)]


def _ready(app, names: list[str]) -> bool:
    states = {st.name: st.state for st in app.supervisor.status()}
    if any(states.get(n) is not State.READY for n in names):
        return False
    gpu = app.store.gpu
    return bool(gpu and gpu.available and {p.instance for p in gpu.processes} >= set(names))


def _lost(app) -> bool:
    return any(st.state in (State.CRASHED, State.FAILED) for st in app.supervisor.status())


async def test_dashboard_shows_each_gpu_split_by_instance(gpu_count, gh, figures, tmp_path):
    specs = [
        gh.sim("chat", (0,), 0.45, sim_load=6),
        gh.sim("batch", (0,), 0.35, model="meta-llama/Llama-3.1-8B-Instruct", sim_load=12),
    ]
    if gpu_count >= 2:
        specs += [
            gh.sim("embed", (1,), 0.25, model="Qwen/Qwen3-0.6B", sim_load=4),
            gh.sim("long", (1,), 0.55, max_model_len=32768, sim_load=2),
        ]
    names = [s.name for s in specs]
    layout_file = tmp_path / "gpu-demo.toml"  # the dashboard hands its layout file to the session supervisor
    layout_file.write_text(dump_layout(gh.layout("gpu-demo", *specs, share=True)))
    app = make_app(layout_file, autostart=True)
    out = gh.artifacts_dir(tmp_path)
    async with app.run_test(size=(120, 22)) as pilot:
        try:
            start = time.monotonic()
            while not _ready(app, names) and time.monotonic() - start < 240 and not _lost(app):
                await pilot.pause(0.5)
            assert _ready(app, names), ({st.name: st.state for st in app.supervisor.status()}, app.store.gpu)
            await pilot.pause(4.0)  # a few metrics scrapes and GPU samples
            text = screen_text(app)
            path = app.save_screenshot(filename="screenshot-gpu.svg", path=str(out))
            (out / "screenshot-gpu.txt").write_text(text)
        finally:
            await app.bridge.close(stop_instances=True)
    for gpu in {s.gpus[0] for s in specs}:
        assert f"GPU{gpu}" in text
    # the per-process table: each instance's row on its GPU (PID, GPU, instance, GiB)
    rows = [line.split() for line in text.splitlines() if "GiB" in line]
    for spec in specs:
        assert any(r[1:3] == [str(spec.gpus[0]), spec.name] for r in rows), (spec.name, rows)
    figures.record("dashboard", screenshot=str(path), instances=names)
