"""The tune screen (`T`): snapshots at 80x24 and 120x40 of a tune in progress (read from a recorded
progress file: launched, scored-from-plan and failed trials, the trial in progress, the plot), and a
Pilot run: `T` opens it, ctrl+r starts `vtui tune … --detach` with the form's settings (a fake
launcher here), the screen follows the progress file it writes, ctrl+x aborts the running tune, and
`ctrl+t` (no longer `T`) cycles the theme."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from vtui.tune import progress
from vtui.ui.screens import tune as tune_screen
from vtui.ui.textdump import screen_text

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]
RECORDED = Path(__file__).parent / "data" / "tune_progress.json"


def recorded_doc(session: str, instance: str) -> dict:
    doc = json.loads(RECORDED.read_text())
    doc["session"], doc["instance"] = session, instance
    doc["pid"], doc["pid_started"] = progress.own_identity()  # a live tune: this very process
    return doc


async def settle(pilot, n: int = 6) -> None:
    for _ in range(n):
        await pilot.pause()
    pending = [w for w in pilot.app.workers if w.group in ("tune-poll", "tune-launch", "control")]
    if pending:
        await pilot.app.workers.wait_for_complete(pending)
    for _ in range(2):
        await pilot.pause()


@pytest.fixture(autouse=True)
def _fixed_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_tune_in_progress(snap_compare, app_factory, fake, size):
    progress.write(progress.progress_path("demo", "qwen"), recorded_doc("demo", "qwen"))

    async def before(pilot):
        await settle(pilot)
        await pilot.press("T")
        await settle(pilot)
        for box in pilot.app.screen.query("Input"):
            box.cursor_blink = False
        await pilot.pause()

    assert snap_compare(app_factory(fake), terminal_size=size, run_before=before)


async def test_start_follow_and_abort_from_the_screen(app_factory, fake, monkeypatch, tmp_path):
    launched: list[list[str]] = []
    aborted: list[dict] = []
    path = progress.progress_path("demo", "qwen")

    def fake_launch(argv: list[str]) -> tuple[int, str]:
        launched.append(argv)
        progress.write(path, recorded_doc("demo", "qwen"))  # what the detached tune writes first
        return 0, "tune of qwen running detached (pid 4242)"

    monkeypatch.setattr(tune_screen.TuneScreen, "launcher", staticmethod(fake_launch))
    monkeypatch.setattr(tune_screen.progress, "abort", lambda doc: aborted.append(doc) or True)
    layout = tmp_path / "demo.toml"
    layout.write_text("")
    app = app_factory(fake)
    app.store.path = layout
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        theme = app.theme
        await pilot.press("ctrl+t")
        assert app.theme != theme  # the theme moved to ctrl+t
        await pilot.press("T")
        await settle(pilot)
        assert isinstance(app.screen, tune_screen.TuneScreen) and app.screen.instance == "qwen"
        assert "No tune of this instance yet" in screen_text(app)
        box = app.screen.query_one("#tune-ttft-p95-ms")
        box.focus()
        box.value = ""
        await pilot.press(*"150")
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert launched, "ctrl+r did not start a tune"
        argv = launched[0]
        assert argv[:3] == [str(layout.resolve()), "qwen", "--detach"]
        assert argv[argv.index("--ttft-p95-ms") + 1] == "150" and "--concurrency" not in argv
        app.screen._poll()
        await settle(pilot)
        text = screen_text(app)
        assert "running" in text and "now: trial 8 [latency]" in text and "benchmarking 7s" in text
        assert "max-num-seqs=32  ← best" not in text  # no best before the tune ends
        assert "plan" in text and "fail" in text and "far below max-num-seqs 64" in text
        await pilot.press("ctrl+x")
        await settle(pilot)
        assert aborted and aborted[0]["pid"] == progress.own_identity()[0]
        # the tune ends: the screen shows the best against the start
        doc = recorded_doc("demo", "qwen")
        doc.update(
            state="done",
            current=None,
            baseline={"goodput_rps": 89.42, "ttft_p95_ms": 74.0, "meets_slo": True, "flags": {}},
            best={
                "goodput_rps": 164.55,
                "ttft_p95_ms": 28.0,
                "meets_slo": True,
                "flags": doc["trials"][4]["flags"],
            },
        )
        progress.write(path, doc)
        app.screen._poll()
        await settle(pilot)
        text = screen_text(app)
        assert "best: 164.55 req/s" in text and "← best" in text and "now:" not in text
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, tune_screen.TuneScreen)


async def test_a_layout_without_a_file_cannot_start_a_tune(app_factory, fake):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("T")
        await settle(pilot)
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert any("needs the layout in a file" in str(n.message) for n in app._notifications)
