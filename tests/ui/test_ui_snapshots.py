"""Snapshot tests of each screen state at 80x24 and 120x40, through the same make_app the CLI uses.

Deterministic: fake supervisor, a fixed clock (make_app's `clock`), fixed samples, the terminal size of
`snap_compare` (App.run_test's size); the tests wait for the workers and run the render pass themselves.
Update after an intended change with `python -m pytest tests/ui/test_ui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from vtui.core.model import Layout, SessionSpec
from vtui.core.state import Phase, State
from vtui.testing.fake_supervisor import FakeSupervisor
from vtui.ui.messages import MetricsArrived

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


@pytest.fixture(autouse=True)
def _fixed_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sim instance's command line starts with sys.executable; its length (a venv path or the
    system's) changes how the detail screen wraps and scrolls. Snapshots render one fixed path."""
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")


DATA = Path(__file__).parent / "data"


async def _settle(pilot, n: int = 4) -> None:
    for _ in range(n):
        await pilot.pause()
    pending = [w for w in pilot.app.workers if w.group in ("diagnosis", "control", "config")]
    if pending:
        await pilot.app.workers.wait_for_complete(pending)
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_no_instances(snap_compare, app_factory, size):
    app = app_factory(FakeSupervisor(Layout(SessionSpec("empty"), ())))
    assert snap_compare(app, terminal_size=size, run_before=_settle)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_starting(snap_compare, app_factory, layout, h, size):
    fake = FakeSupervisor(layout, auto_ready=False, clock=lambda: h.NOW - 20)

    async def before(pilot):
        await _settle(pilot)
        fake.set_state("qwen", State.STARTING, Phase.LOADING_WEIGHTS)
        fake.set_state("llama", State.STARTING, Phase.CAPTURING_GRAPHS)
        fake.set_state("embed", State.STOPPED)
        await _settle(pilot)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_ready_under_load(snap_compare, app_factory, fake, h, size):
    async def before(pilot):
        await _settle(pilot)
        # 40 s of samples through the App's handler, in one go (no render pass can see half of them),
        # then the render timer's pass.
        for i in range(40):
            for name, scale in (("qwen", 1.0), ("llama", 0.4)):
                pilot.app.on_metrics_arrived(
                    MetricsArrived(
                        h.metrics(
                            name,
                            at=h.NOW - 40 + i,
                            generation_tps=scale * (300 + 10 * (i % 13)),
                            kv_usage=scale * (0.3 + 0.015 * i),
                            waiting=float(i % 4),
                        )
                    )
                )
        pilot.app.repaint()
        await _settle(pilot)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_crashed_with_diagnosis(snap_compare, app_factory, fake, size):
    lines = (DATA / "max_model_len_too_big.log").read_text().splitlines()

    async def before(pilot):
        await _settle(pilot)
        fake.crash("qwen", lines)
        await _settle(pilot, 6)
        await pilot.press("enter")
        await _settle(pilot)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_no_gpu(snap_compare, app_factory, fake, h, size):
    app = app_factory(fake, gpu=h.gpu_sample(available=False))
    assert snap_compare(app, terminal_size=size, run_before=_settle)


async def _load(pilot, h) -> None:
    """40 s of samples for two instances, then the render pass (as test_snapshot_ready_under_load)."""
    await _settle(pilot)
    for i in range(40):
        for name, scale in (("qwen", 1.0), ("llama", 0.4)):
            pilot.app.on_metrics_arrived(
                MetricsArrived(
                    h.metrics(
                        name,
                        at=h.NOW - 40 + i,
                        generation_tps=scale * (300 + 10 * (i % 13)),
                        kv_usage=scale * (0.3 + 0.015 * i),
                        running=float(10 + i % 5),
                        waiting=float(i % 4),
                    )
                )
            )
    pilot.app.repaint()
    await _settle(pilot)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_detail_plots(snap_compare, app_factory, fake, h, size):
    """The detail screen's history plots: titles, axes, the 5 min window."""

    async def before(pilot):
        await _load(pilot, h)
        await pilot.press("enter")
        await _settle(pilot)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


@pytest.mark.parametrize("theme", ["textual-light", "vtui-high-contrast"])
def test_snapshot_themes(snap_compare, app_factory, fake, h, theme):
    """The dashboard in the light and the high-contrast theme (the colours come from the theme)."""

    async def before(pilot):
        pilot.app.theme = theme
        await _load(pilot, h)

    assert snap_compare(app_factory(fake), terminal_size=(120, 40), run_before=before)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", ["notice", "command_line"])
def test_snapshot_notice_and_command_line(snap_compare, app_factory, fake, h, size, kind):
    """A startup warning on the notice line (the fleet rows and the GPU panel in full above it), and the
    `:` command line open with a completion."""

    async def before(pilot):
        await _load(pilot, h)
        if kind == "notice":
            pilot.app.notify(
                "keys.toml: keys.instance.nope: unknown binding id", severity="warning", timeout=600
            )
        else:
            await pilot.press("colon", *"restart l")
            pilot.app.screen.query_one("#command-input").cursor_blink = False
            await pilot.pause(0.2)  # the completion is looked up in a worker
        await _settle(pilot)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


def test_snapshot_gpu_table_with_a_multi_line_command_at_200_columns(snap_compare, app_factory, fake, h):
    """An "other" process whose command line holds newlines (`python -c` with a script: seen on an H200)
    stays on its one row of the GPU table, its line breaks shown as `\\n`."""
    from vtui.telemetry.gpu import GpuProcess

    sample = h.gpu_sample()
    script = "python3 -c import torch\nx = torch.empty(4 << 30, device='cuda')\r\n\tinput()"
    sample = replace(
        sample, processes=(*sample.processes, GpuProcess(3, 4242, int(4.5 * 2**30), None, script))
    )

    async def before(pilot):
        await _load(pilot, h)

    assert snap_compare(app_factory(fake, gpu=sample), terminal_size=(200, 40), run_before=before)
