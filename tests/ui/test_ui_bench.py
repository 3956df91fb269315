"""The bench screen: live progress from run_bench, steps beside the server's figures, an ASCII plot,
results files where `vtui bench` writes them, and the run kept in the instance's flag history."""

from __future__ import annotations

import json

import pytest

from vtui.bench import BenchProgress, BenchResult, Dist, ServerStep, StepResult
from vtui.core.paths import runs_dir
from vtui.ui.screens.bench import BenchScreen, config_from, plot_text, requests_for
from vtui.ui.textdump import screen_text


def step(i: int, c: int, tps: float, ttft95: float) -> StepResult:
    return StepResult(
        index=i,
        concurrency=c,
        request_rate=None,
        requests=16,
        completed=16 - i,
        failed=i,
        duration_s=2.0,
        req_per_s=8.0 * c,
        output_tok_per_s=tps,
        total_tok_per_s=tps * 3,
        ttft=Dist(0.05, 0.04, ttft95, ttft95),
        itl=Dist(),
        e2e=Dist(),
        tpot_mean=None,
        server=ServerStep(scrapes=4, kv_usage_peak=0.1 * (i + 1), waiting_peak=float(i), preemptions=0.0),
    )


async def fake_runner(config, on_progress):
    steps = []
    for i, level in enumerate(config.step_levels()):
        on_progress(BenchProgress(i, len(config.step_levels()), level, 4, 3, 0, 1, 0.5, "running"))
        steps.append(step(i, int(level), 100.0 * (i + 1), 0.1 * (i + 1)))
        on_progress(
            BenchProgress(i, len(config.step_levels()), level, 16, 16, 0, 0, 1.0, "step-done", steps[-1])
        )
    return BenchResult(config=config, model="qwen3-b", started_at=1_700_000_000.0, steps=tuple(steps))


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


def test_form_validation_and_plot():
    cfg = config_from(
        {"mode": "ramp", "concurrency": "8", "requests": "8", "input-len": "16", "output-len": "8"},
        "http://127.0.0.1:1",
    )
    assert cfg.mode == "ramp" and cfg.step_levels() == (1.0, 2.0, 4.0, 8.0)
    # fewer requests per step than workers never has `concurrency` in flight (c=106 with 32 requests)
    with pytest.raises(ValueError, match="requests: 32 per step cannot keep concurrency 106 in flight"):
        config_from(
            {"mode": "fixed", "concurrency": "106", "requests": "32", "input-len": "1", "output-len": "1"},
            "h",
        )
    assert requests_for(106) == 424 and requests_for(2) == 32
    try:
        config_from({"mode": "fixed", "concurrency": "x"}, "http://h")
    except ValueError as exc:
        assert "concurrency: expected a whole number" in str(exc)
    else:
        raise AssertionError("no error")
    text = plot_text([step(0, 1, 50.0, 0.1), step(1, 2, 100.0, 0.4)], width=10).plain
    assert (
        "c=1    |#####     | 50 tok/s" in text
        and "  c=2    |##########| 100 tok/s\n         |==========| 400ms" in text
    )


async def test_bench_screen_runs_ramp_saves_results_and_records_history(fake, app_factory):
    app = app_factory(fake, bench_runner=fake_runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("B")
        await settle(pilot)
        assert isinstance(app.screen, BenchScreen)
        app.screen.query_one("#bench-mode").value = "ramp"
        app.screen.query_one("#bench-concurrency").value = "4"
        await pilot.press("ctrl+r")
        started = False
        for _ in range(200):  # the run starts once the inputs took the keys before ctrl+r, then ends
            await pilot.pause(0.01)
            started = started or app.screen.running
            if started and not app.screen.running:
                break
        await settle(pilot)
        # the run's task is the screen's own, not Textual's message-loop task (`MessagePump._task`, which
        # an attribute of the same name overwrote: None after a run, so closing the screen never awaited it)
        assert not app.screen.task.done()
        text = screen_text(app)
        assert "c=4" in text and "done" in text and "Plot: out tok/s" in text
        assert "30%" in text  # the server's KV peak beside the step
        files = sorted((runs_dir() / "bench").glob("bench-*-qwen.*"))
        assert [f.suffix for f in files] == [".csv", ".json"]
        assert len(json.loads(files[1].read_text())["steps"]) == 3
        bench = app.store.views["qwen"].flag_history[-1].bench
        assert (
            bench["best_out_tps"] == 300.0 and bench["best_step"] == "c=4" and bench["json"] == str(files[1])
        )


async def test_bench_needs_a_ready_instance(fake, app_factory):
    app = app_factory(fake, autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("B")
        await settle(pilot)
        assert not isinstance(app.screen, BenchScreen)  # greyed out: the instance is STOPPED


async def test_flag_history_is_persisted_loaded_and_shows_what_a_change_bought(fake, app_factory, layout):
    from vtui.ui import history
    from vtui.ui.store import FlagRecord

    path = history.history_path("demo", "qwen")
    old = FlagRecord(
        {"max-num-seqs": 128},
        outcome="ready",
        kv_tokens=32768,
        max_concurrency=4.0,
        bench={"mode": "concurrency", "best_out_tps": 100.0, "best_step": "c=8"},
    )
    history.save(path, history.dumps([old]))
    app = app_factory(fake)
    # tall enough for the detail screen's plots and, below them, the flag history
    async with app.run_test(size=(120, 110)) as pilot:
        for _ in range(100):
            await pilot.pause(0.01)
            if app.history.ready and path.exists() and "65536" in path.read_text():
                break
        entries = __import__("json").loads(path.read_text())["entries"]
        assert entries[0]["kv_tokens"] == 32768 and entries[-1]["kv_tokens"] == 65536  # the fake's 8192 x 8
        assert entries[-1]["outcome"] == "ready"
        await pilot.press("enter")
        await settle(pilot)
        text = screen_text(app)
        assert "bench concurrency: best 100 tok/s at c=8" in text
        assert "bought: KV +32,768 tok (+100%)" in text
    # bounded: never more than FLAG_HISTORY entries on disk
    records = [FlagRecord({"max-num-seqs": i}, outcome="ready") for i in range(80)]
    history.save(path, history.dumps(records))
    assert len(history.load(path)) == history.FLAG_HISTORY


def test_the_load_test_starts_at_the_logs_max_concurrency_capped_by_max_num_seqs():
    from vtui.ui.screens.bench import starting_concurrency

    assert starting_concurrency(106.8, 512) == 106  # Maximum concurrency for 8192 tokens: 106.80x
    assert starting_concurrency(128.0, 8) == 8  # never above max-num-seqs
    assert starting_concurrency(None, 256) == 8  # the log has not said yet
    assert starting_concurrency(None, 4) == 4
    assert starting_concurrency(0.5, None) == 8  # not even one full-length request fits: the default
    assert starting_concurrency(3.2, None) == 3
