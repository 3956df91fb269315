"""On a real GPU: the dashboard's per-process GPU table (the GPU panel, attached to the session supervisor
as `vtui LAYOUT` is) equals NVML's own per-process list, read directly: the same PIDs with the same
memory, each row naming the instance whose process tree holds it, and a process vtui did not start (a
torch allocation of the test's own) shown as `other` with its PID. The screen goes to
$VTUI_GPU_ARTIFACTS as screenshot-gpu-table.svg (and .txt)."""

from __future__ import annotations

import asyncio
import re

import pytest

from vtui.ui import fmt
from vtui.ui.app import make_app
from vtui.ui.textdump import screen_text

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(240)]

GIB = 1 << 30
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+) GiB\b")  # PID  GPU  INSTANCE  GPU MEM GiB  COMMAND


def table_rows(text: str) -> dict[int, tuple[int, str, str]]:
    """pid -> (gpu, instance or "other", GiB as shown) from the GPU panel's rows on the screen."""
    rows = {}
    for line in text.splitlines():
        line = line.strip("│┃ ")
        if m := ROW.match(line):
            rows[int(m[1])] = (int(m[2]), m[3], m[4])
    return rows


async def test_the_dashboards_process_table_is_nvmls_list_with_instances_named(gpus, gh, figures, tmp_path):
    entries = [
        gh.sim_entry(gpus, "chat", [0], 0.3),
        gh.sim_entry(gpus, "batch", [0], 0.25, child=False, model="meta-llama/Llama-3.1-8B-Instruct"),
    ]
    path, session = gh.write_layout(tmp_path, entries)
    out = gh.artifacts_dir(tmp_path)
    gh.quiet(gpus)
    with gpus.holding(4 * GIB) as other, gh.brought_down(path):
        up = await asyncio.to_thread(gh.vtui, "up", str(path), "--timeout", "240")
        assert up.returncode == 0, gh.said(up)
        trees = await asyncio.to_thread(gh.instance_pids, session)
        owner = {pid: name for name, pids in trees.items() for pid in pids}
        app = make_app(path, autostart=False)  # the dashboard: a client of the session supervisor
        async with app.run_test(size=(120, 34)) as pilot:

            def shown() -> bool:
                gpu = app.store.gpu
                return bool(gpu and gpu.available) and {p.instance for p in gpu.processes} >= {
                    "chat",
                    "batch",
                    None,
                }

            for _ in range(120):
                if shown():
                    break
                await pilot.pause(0.5)
            assert shown(), app.store.gpu
            # the panel's sample and NVML's list, read right after it (the memory stays put: a mismatch
            # can only be a sample from before a change; a few more samples settle that)
            for _ in range(10):
                sample = app.store.gpu
                nvml = await asyncio.to_thread(gpus.read)
                table = {(p.gpu_index, p.pid): p.used_memory for p in sample.processes}
                if table == nvml.processes:
                    break
                await pilot.pause(1.1)
            await pilot.pause(0.5)  # the panel repaints from the store
            text = screen_text(app)
            app.save_screenshot(filename="screenshot-gpu-table.svg", path=str(out))
            (out / "screenshot-gpu-table.txt").write_text(text)
        await app.bridge.close(stop_instances=False)
        rows = table_rows(text)
        figures.record(
            "gpu_table",
            backend=gpus.kind,
            other_pid=other.pid,
            nvml=[[g, pid, gh.mib(n)] for (g, pid), n in sorted(nvml.processes.items())],
            vtui=[
                [p.gpu_index, p.pid, gh.mib(p.used_memory), p.instance or "other"] for p in sample.processes
            ],
            shown=[[pid, *row] for pid, row in sorted(rows.items())],
            equal=table == nvml.processes,
        )
        assert table == nvml.processes, (table, nvml.processes)
        for p in sample.processes:
            assert p.instance == owner.get(p.pid), (p, trees)  # None: a process of no instance
        assert other.pid in {p.pid for p in sample.processes if p.instance is None}
        assert {p.instance for p in sample.processes} == {"chat", "batch", None}
        # the screen shows every one of NVML's processes, named as above, with NVML's memory
        for (gpu, pid), nbytes in nvml.processes.items():
            assert rows.get(pid) == (gpu, owner.get(pid, "other"), fmt.gib(nbytes)), (pid, rows, text)
        assert set(rows) == nvml.pids(), (rows, text)
