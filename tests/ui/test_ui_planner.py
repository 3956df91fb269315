"""The planner in the flag editor (re-planned as values change) and planned-vs-reported in the detail."""

from __future__ import annotations

from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.testing.fake_supervisor import FakeSupervisor
from vtui.ui import planning
from vtui.ui.screens.flags import FlagEditorScreen
from vtui.ui.textdump import screen_text


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


async def configs_loaded(pilot, app) -> None:
    """Until the config worker has reported (it runs in a thread), then a repaint."""
    for _ in range(200):
        if app.store.configs:
            break
        await pilot.pause(0.01)
    assert app.store.configs, "the model config never loaded"
    await settle(pilot)


def test_sim_builtin_config_and_plan_figures():
    config, reason = planning.load_config(("sim", "Qwen/Qwen3-8B", None))
    assert reason is None and config.num_layers == 36 and config.source == "sim built-in table"
    flags = {"tensor-parallel-size": 2, "max-model-len": 8192, "kv-cache-memory-bytes": 2**30}
    result, why = planning.try_plan(config, planning.plan_params(flags, 80.0))
    # Qwen3-8B: 36 layers x 8 KV heads / TP 2 x 128 dims x 2 (K,V) x 2 bytes = 73,728 B per token per GPU
    assert why is None and result.kv_bytes_per_token == 73728
    assert result.kv_budget_source == "kv-cache-memory-bytes"
    assert result.num_gpu_blocks == 2**30 // (73728 * 16)
    none, reason = planning.load_config(("vllm", "nobody/no-such-model", None))
    assert none is None and "no config.json" in reason
    text = planning.plan_text(None, reason).plain
    assert "--" in text and "no config.json" in text


def test_gpu_memory_from_nvml_then_session(h):
    spec = InstanceSpec("a", "m", 8000, gpus=(0, 1))
    assert round(planning.gpu_memory_gib(spec, SessionSpec(), h.gpu_sample())) == 141
    assert planning.gpu_memory_gib(spec, SessionSpec(gpu_memory_gib=40), h.gpu_sample(False)) == 40
    assert planning.gpu_memory_gib(spec, SessionSpec(), h.gpu_sample(False)) is None


async def test_flag_editor_replans_as_values_change(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await configs_loaded(pilot, app)
        assert isinstance(app.screen, FlagEditorScreen)
        text = screen_text(app)
        assert "KV 72.0 KiB/token" in text and "max concurrency at 8,192" in text and "fits" in text
        before = app.screen.query_one("#flag-plan").render().plain
        app.screen.query_one("#flag-gpu-memory-utilization").value = "0.5"
        await settle(pilot)
        after = app.screen.query_one("#flag-plan").render().plain
        assert after != before and "KV tokens" in after
        app.screen.query_one("#flag-max-model-len").value = "40000"
        app.screen.query_one("#flag-gpu-memory-utilization").value = "0.07"
        await settle(pilot)
        assert "does NOT fit; longest that does" in screen_text(app)


async def test_flag_editor_without_config_shows_dashes_and_reason(app_factory):
    layout = Layout(SessionSpec("x"), (InstanceSpec("v", "/nonexistent/model", 8001, engine="vllm"),))
    app = app_factory(FakeSupervisor(layout))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await configs_loaded(pilot, app)
        text = screen_text(app)
        assert "Planner --  (/nonexistent/model: no config.json" in text and "never downloads - pass" in text


async def test_detail_shows_planned_beside_reported(layout, app_factory):
    from vtui.core.state import State
    from vtui.ui.screens.detail import DetailScreen

    fake = FakeSupervisor(layout, auto_ready=False)
    app = app_factory(fake)
    async with app.run_test(size=(120, 60)) as pilot:
        await settle(pilot)
        # Qwen3-8B TP 2: 73,728 B/token, 16-token blocks; 10 GiB -> 9,102 blocks = 145,632 tokens
        fake.emit_logs(
            "qwen",
            [
                "INFO 01-01 12:00:01 [gpu_worker.py:298] Available KV cache memory: 10.00 GiB",
                "INFO 01-01 12:00:01 [kv_cache_utils.py:2327] GPU KV cache size: 145,632 tokens, Maximum "
                "concurrency for 8,192 tokens per request: 17.78x",
            ],
        )
        fake.set_state("qwen", State.READY)
        await settle(pilot)
        await pilot.press("enter")
        await configs_loaded(pilot, app)
        assert isinstance(app.screen, DetailScreen)
        text = app.screen.query_one("#detail-planned").render().plain
        assert "Planned vs reported" in text and "log (0.01 GiB)" in text
        row = next(line for line in text.splitlines() if "KV cache tokens" in line)
        assert "145,632" in row.split("KV cache tokens")[1].split()[0] and row.split()[-1] == "exact", row
