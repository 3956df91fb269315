"""Telemetry on a supervised sim: ScrapeLoop's samples of a loaded instance move, and the startup facts
read from the supervisor's log lines agree with what /metrics reports."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from vtui.core.state import State
from vtui.layouts import load_layout
from vtui.telemetry.metrics import MetricsSample
from vtui.telemetry.scrape import ScrapeLoop
from vtui.telemetry.startup_log import parse_startup

from .conftest import sim_instance, supervisor, until, write_layout

pytestmark = pytest.mark.timeout(60)


def _busy(sample: MetricsSample) -> bool:
    return bool(sample.running and sample.generation_tps and sample.ttft.p50 is not None and sample.kv_usage)


async def test_scrape_of_a_loaded_sim_matches_its_startup_log(tmp_path: Path, session: str) -> None:
    layout = load_layout(write_layout(tmp_path, session, [sim_instance("loaded", gpus=(0,), sim_load=4)]))
    sup = supervisor(layout)
    samples: list[MetricsSample] = []
    errors: list[str] = []
    try:
        await sup.start()
        assert (await sup.wait_settled(timeout=30))["loaded"] is State.READY
        spec = sup.layout.instance("loaded")
        loop = ScrapeLoop(
            "loaded", spec.base_url, samples.append, interval=0.2, timeout=3.0, on_error=errors.append
        )
        task = asyncio.create_task(loop.run())
        try:
            await until(
                lambda: len(samples) >= 3 and _busy(samples[-1]), 20, f"a busy sample ({errors[-1:]})"
            )
        finally:
            loop.stop()
            await asyncio.wait_for(task, 5)
        last = samples[-1]
        assert last.instance == "loaded" and last.vllm_names == "v1"
        assert last.running is not None and last.running > 0
        assert last.kv_usage is not None and 0 < last.kv_usage <= 1
        assert last.generation_tps is not None and last.generation_tps > 0
        assert last.ttft.p50 is not None and last.ttft.p50 > 0
        assert not any(s.counter_reset for s in samples[1:])

        facts = parse_startup(sup.recent_lines("loaded"))
        assert facts.engine == "V1" and facts.max_model_len == 4096
        assert facts.kv_cache_tokens is not None and facts.kv_cache_tokens == last.kv_capacity_tokens
        assert facts.non_default_args is not None and facts.non_default_args.get("max_model_len") == 4096
    finally:
        await sup.close(stop_instances=True)
