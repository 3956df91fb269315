"""Snapshot tests of every screen but the dashboard (tests/ui/test_ui_snapshots.py has it) at 80x24 and
120x40: detail, logs, flags, presets, bench, help and each dialog.

The modals open over the log screen (fixed lines), not the dashboard, so a dashboard change does not
redraw these. Deterministic as the dashboard's: fake supervisor, fixed clock and samples, one interpreter
path. Update after an intended change with
`python -m pytest tests/ui/test_ui_screen_snapshots.py --snapshot-update`, then look at the pictures.
"""

from __future__ import annotations

import sys

import pytest
from textual.widgets import Input

from vtui.ui.messages import LogsArrived, MetricsArrived
from vtui.ui.screens.dialogs import ConfirmScreen, DiffScreen, PathScreen, QuitScreen
from vtui.ui.screens.presets import PresetScreen

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]

LOG_LINES = [
    "INFO 12-01 13:00:00 [api_server.py:1200] vLLM API server version 0.11.0",
    "INFO 12-01 13:00:01 [model_runner.py:1100] Loading weights took 15.27 GiB and 1.62 seconds",
    'INFO:     127.0.0.1:40112 - "GET /metrics HTTP/1.1" 200 OK',
    "WARNING 12-01 13:00:02 [config.py:400] max_num_batched_tokens is below max_model_len",
    'INFO:     127.0.0.1:40113 - "GET /health HTTP/1.1" 200 OK',
    "INFO 12-01 13:00:03 [gpu_worker.py:300] GPU KV cache size: 81,920 tokens",
    "INFO 12-01 13:00:04 [api_server.py:1300] Starting vLLM API server on http://0.0.0.0:8001",
    *[
        f"INFO 12-01 13:00:{5 + i:02d} [loggers.py:123] Engine 000: Avg generation throughput: {i}.0"
        for i in range(8)
    ],
    "ERROR 12-01 13:00:14 [serving.py:99] request 42 failed: context length exceeded",
    *[
        f"INFO 12-01 13:00:{15 + i:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {i}.0"
        for i in range(20)
    ],
]


@pytest.fixture(autouse=True)
def _fixed_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")


async def _settle(pilot, n: int = 4) -> None:
    for _ in range(n):
        await pilot.pause()
    pending = [w for w in pilot.app.workers if w.group in ("diagnosis", "control", "config")]
    if pending:
        await pilot.app.workers.wait_for_complete(pending)
    for box in pilot.app.screen.query(Input):
        box.cursor_blink = False  # a blinking cursor is on or off by the clock
    # Until three frames a moment apart are alike: what is laid out after a refresh (a modal's scrollbar)
    # is drawn by then. Under load the fixed pauses above could end first (CI drew the help screen once
    # without its scrollbar's thumb; two alike frames were not always enough under xdist either).
    last, alike = None, 0
    for _ in range(40):
        await pilot.pause(0.05)
        await pilot.pause()
        now = pilot.app.export_screenshot()
        alike = alike + 1 if now == last else 0
        if alike >= 2:
            break
        last = now


def _samples(pilot, h) -> None:
    for i in range(40):
        pilot.app.on_metrics_arrived(
            MetricsArrived(
                h.metrics(
                    "qwen", at=h.NOW - 40 + i, generation_tps=300 + 10 * (i % 13), kv_usage=0.3 + 0.015 * i
                )
            )
        )
    pilot.app.repaint()


async def _on_logs(pilot, fake) -> None:
    await _settle(pilot)
    fake.emit_logs("qwen", LOG_LINES)
    await _settle(pilot)
    await pilot.press("l")
    await _settle(pilot)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_logs(snap_compare, app_factory, fake, size):
    async def before(pilot):
        await _on_logs(pilot, fake)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_logs_flood_and_probes(snap_compare, app_factory, fake, size):
    async def before(pilot):
        await _on_logs(pilot, fake)
        pilot.app.on_logs_arrived(LogsArrived("qwen", ("INFO after the flood",), skipped=123_456))
        await pilot.press("P")
        await _settle(pilot)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_detail_ready(snap_compare, app_factory, fake, h, size):
    async def before(pilot):
        await _settle(pilot)
        _samples(pilot, h)
        await pilot.press("enter")
        await _settle(pilot)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_flags(snap_compare, app_factory, fake, size):
    async def before(pilot):
        await _settle(pilot)
        await pilot.press("f")
        await _settle(pilot)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_bench(snap_compare, app_factory, fake, size):
    async def before(pilot):
        await _settle(pilot)
        await pilot.press("B")
        await _settle(pilot)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_help(snap_compare, app_factory, fake, size):
    async def before(pilot):
        await _on_logs(pilot, fake)
        await pilot.press("question_mark")
        await _settle(pilot)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


def _dialog(kind: str, fake):
    spec = fake.layout.instance("qwen")
    return {
        "presets": lambda: PresetScreen("qwen"),
        "confirm": lambda: ConfirmScreen("Stop qwen? Its process group ends."),
        "diff": lambda: DiffScreen(
            "qwen", dict(spec.flags), {**spec.flags, "max-num-seqs": 64, "enable-prefix-caching": True}
        ),
        "path": lambda: PathScreen("Save layout as", "layouts/demo.toml"),
        "quit": lambda: QuitScreen(),
        "quit_unsaved": lambda: QuitScreen(unsaved=True),
    }[kind]()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", ["presets", "confirm", "diff", "path", "quit", "quit_unsaved"])
def test_snapshot_dialog(snap_compare, app_factory, fake, size, kind):
    async def before(pilot):
        await _on_logs(pilot, fake)
        await pilot.app.push_screen(_dialog(kind, fake))
        await _settle(pilot)

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)
