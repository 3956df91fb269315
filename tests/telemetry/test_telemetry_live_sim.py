"""Live: the simulated engine (`python -m vtui.sim`) started for real, its log read by parse_startup
and its /metrics by ScrapeLoop, for both metric namings it speaks."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vtui.core.state import Phase
from vtui.telemetry.scrape import ScrapeLoop
from vtui.telemetry.startup_log import parse_startup


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("naming", ["0.32", "v0"])
async def test_sim_log_and_metrics(naming: str, tmp_path: Path) -> None:
    port = _free_port()
    log = tmp_path / "sim.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vtui.sim",
                "Qwen/Qwen3-8B",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--max-model-len",
                "8192",
                "--sim-startup-scale",
                "0",
                "--sim-load",
                "2",
                "--sim-metrics-version",
                naming,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        facts = parse_startup([])
        deadline = time.monotonic() + 30
        while facts.phase is not Phase.API_UP:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the sim never came up"
            facts = parse_startup(log.read_text(errors="replace").splitlines())
            await asyncio.sleep(0.1)
        assert facts.engine == "V1" and facts.max_model_len == 8192 and facts.kv_cache_tokens

        samples = []
        loop = ScrapeLoop("sim", f"http://127.0.0.1:{port}", samples.append, interval=0.3, timeout=3.0)
        task = asyncio.create_task(loop.run())
        deadline = time.monotonic() + 20
        while len(samples) < 3 or not samples[-1].generation_tps:
            assert time.monotonic() < deadline, (loop.last_error, samples[-1:])
            await asyncio.sleep(0.1)
        loop.stop()
        await asyncio.wait_for(task, 5)
        last = samples[-1]
        assert last.vllm_names == ("v1" if naming == "0.32" else "v0")
        assert last.kv_capacity_tokens == facts.kv_cache_tokens  # metrics and log agree
        assert last.running is not None and last.kv_usage is not None and 0 <= last.kv_usage <= 1
        assert last.generation_tps > 0 and not last.counter_reset
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
