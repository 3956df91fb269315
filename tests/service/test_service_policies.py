"""Supervision policies in the session supervisor, on sims, with no dashboard open: a SIGSTOPped (hung)
instance restarted after `restart_unhealthy_after`, an outside SIGTERM restarted under on-failure with
the signal named, sleep/wake with the simulated GPU memory freed and requests served after, the GPU memory
check refusing a start and naming the holder, and `on_event` hearing each event once."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import httpx
import pytest
import tomli_w

from vtui.service.client import ServiceClient
from vtui.sim.gpus import GpuRegistry

from .conftest import alive, healthy, marked, ps_rows, sim_instance, supervisors, vtui, wait_for

pytestmark = pytest.mark.timeout(180)

GIB = 1 << 30


def layout(folder: Path, session: str, instances: list[dict], **session_keys) -> Path:
    path = folder / "layout.toml"
    data = {"session": {"name": session, "allow_gpu_sharing": True, **session_keys}, "instance": instances}
    path.write_text(tomli_w.dumps(data))
    return path


def up(path: Path, *extra: str) -> dict:
    result = vtui("up", str(path), *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    return ps_rows(str(path))


def restarted(path: Path, name: str, old: int):
    def check() -> dict | None:
        row = ps_rows(str(path))[name]
        return row if row["state"] == "ready" and row["pid"] not in (None, old) else None

    return check


def state_events(session: str, name: str) -> list[dict]:
    events = ServiceClient(session).get("/events?n=2000")["events"]
    return [e for e in events if e["kind"] == "state" and e["instance"] == name]


def test_a_hung_instance_is_restarted_after_restart_unhealthy_after(tmp_path: Path, session: str) -> None:
    inst = {**sim_instance("a", max_restarts=2), "restart_unhealthy_after": 1}
    path = layout(tmp_path, session, [inst])
    first = up(path)["a"]["pid"]
    os.kill(first, signal.SIGSTOP)  # alive, answers nothing: only the liveness policy can help
    row = wait_for(restarted(path, "a", first), timeout=90, what="a READY on a new pid")
    assert row["restarts"] == 1 and healthy(row["port"])
    assert not alive(first)
    edges = [(e["old"], e["new"], e["reason"]) for e in state_events(session, "a")]
    assert ("ready", "unhealthy") in [(o, n) for o, n, _ in edges]
    stop = next(r for o, n, r in edges if (o, n) == ("unhealthy", "stopping"))
    assert "restart_unhealthy_after = 1" in stop
    assert ("stopping", "crashed") in [(o, n) for o, n, _ in edges]
    assert vtui("down", str(path)).returncode == 0
    assert not marked(session + "/")


def test_an_outside_sigterm_is_restarted_under_on_failure_and_named(tmp_path: Path, session: str) -> None:
    path = layout(tmp_path, session, [sim_instance("a", max_restarts=2)])
    first = up(path)["a"]["pid"]
    os.kill(first, signal.SIGTERM)  # what `pkill -f vllm` does: vLLM exits 0
    row = wait_for(restarted(path, "a", first), timeout=60, what="a READY on a new pid")
    assert row["restarts"] == 1 and not alive(first)
    crashed = [e["reason"] for e in state_events(session, "a") if e["new"] == "crashed"]
    assert len(crashed) == 1 and "SIGTERM" in crashed[0] and "code 0" in crashed[0], crashed
    assert vtui("down", str(path)).returncode == 0


def _held(pid: int) -> int:
    return sum(GpuRegistry().holders().get(pid, {}).values())


def test_sleep_frees_the_simulated_gpu_memory_and_wake_serves_again(tmp_path: Path, session: str) -> None:
    inst = {**sim_instance("a", gpus=(0,)), "sleep_mode": True}
    path = layout(tmp_path, session, [inst])
    row = up(path)["a"]
    pid, port = row["pid"], row["port"]
    before = _held(pid)
    assert before > 0
    slept = vtui("sleep", str(path), "a", "--level", "1", "--json")
    assert slept.returncode == 0, slept.stdout + slept.stderr
    assert json.loads(slept.stdout)["state"] == "asleep"
    assert _held(pid) < before  # the KV cache (and the weights, offloaded) left the simulated GPU
    woke = vtui("wake", str(path), "a", "--json")
    assert woke.returncode == 0, woke.stdout + woke.stderr
    assert json.loads(woke.stdout)["state"] == "ready" and ps_rows(str(path))["a"]["pid"] == pid
    answer = httpx.post(
        f"http://127.0.0.1:{port}/v1/completions",
        json={"model": row["model"], "prompt": "hi", "max_tokens": 4},
        timeout=30,
        trust_env=False,
    )
    assert answer.status_code == 200 and answer.json()["choices"]
    assert _held(pid) >= before
    assert vtui("down", str(path)).returncode == 0


def test_an_instance_asleep_when_its_supervisor_died_is_readopted_asleep(
    tmp_path: Path, session: str
) -> None:
    path = layout(tmp_path, session, [{**sim_instance("a", gpus=(0,)), "sleep_mode": True}])
    pid = up(path)["a"]["pid"]
    slept = vtui("sleep", str(path), "a", "--level", "2", "--json")
    assert slept.returncode == 0, slept.stdout + slept.stderr
    [old] = supervisors(session)
    old.kill()
    old.wait(5)
    row = ps_rows(str(path))["a"]  # a new supervisor re-adopts it: asleep, not READY
    assert (row["state"], row["pid"], row["adopted"]) == ("asleep", pid, True), row
    woke = vtui("wake", str(path), "a", "--json")
    assert woke.returncode == 0 and json.loads(woke.stdout)["state"] == "ready", woke.stdout + woke.stderr
    # the startup facts outlive the wake (its READY is no launch: the run's lines hold no startup)
    [status] = ServiceClient(session).get("/status")["instances"]
    assert status["facts"] and status["facts"]["kv_cache_tokens"], status["facts"]
    assert vtui("down", str(path)).returncode == 0


def test_sleep_is_refused_without_sleep_mode_and_on_a_public_bind(tmp_path: Path, session: str) -> None:
    public = {**sim_instance("p", gpus=(1,)), "sleep_mode": True, "host": "0.0.0.0"}
    path = layout(tmp_path, session, [sim_instance("a", gpus=(0,)), public])
    up(path)
    off = vtui("sleep", str(path), "a")
    assert off.returncode == 1 and "sleep_mode = true" in off.stderr
    bind = vtui("sleep", str(path), "p")
    assert bind.returncode == 1 and "loopback" in bind.stderr
    assert vtui("sleep", str(path), "nobody").returncode == 2
    assert vtui("down", str(path)).returncode == 0


def test_the_gpu_memory_check_refuses_a_start_naming_the_holder(tmp_path: Path, session: str) -> None:
    registry = GpuRegistry()
    registry.claim(os.getpid(), [0], 70 * GIB)  # this test holds 70 of the simulated GPU's 80 GiB
    try:
        path = layout(tmp_path, session, [sim_instance("a", gpus=(0,), sim_gpu_memory_gib=80)])
        refused = vtui("up", str(path))
        assert refused.returncode != 0
        assert f"held by pid {os.getpid()}" in refused.stderr and "GPU 0" in refused.stderr, refused.stderr
        assert ps_rows(str(path))["a"]["state"] == "stopped" and not marked(session + "/")
        forced = vtui("up", str(path), "--force")  # the check steps aside; the sim itself then refuses
        assert "forced" in forced.stdout + forced.stderr
    finally:
        registry.release(os.getpid())
    assert up(path)["a"]["state"] == "ready"
    assert vtui("down", str(path)).returncode == 0


def test_the_gpu_memory_check_names_the_instance_holding_the_gpu(tmp_path: Path, session: str) -> None:
    path = layout(tmp_path, session, [sim_instance("a", gpus=(0,)), sim_instance("b", gpus=(0,))])
    refused = vtui("up", str(path))
    assert refused.returncode != 0
    a = ps_rows(str(path))["a"]
    assert a["state"] == "ready" and ps_rows(str(path))["b"]["state"] == "stopped"
    assert f"held by pid {a['pid']} (instance 'a'" in refused.stderr, refused.stderr
    assert vtui("down", str(path)).returncode == 0


def test_on_event_hears_each_event_once(tmp_path: Path, session: str) -> None:
    heard = tmp_path / "heard.jsonl"
    hook = tmp_path / "hook.py"
    hook.write_text(f"import sys\nopen({str(heard)!r}, 'a').write(sys.stdin.read().strip() + '\\n')\n")
    inst = {**sim_instance("a", max_restarts=2), "sleep_mode": True}
    path = layout(tmp_path, session, [inst], on_event=[sys.executable, str(hook)], on_event_cooldown=0)
    first = up(path)["a"]["pid"]
    os.kill(first, signal.SIGKILL)
    wait_for(restarted(path, "a", first), timeout=60, what="a READY on a new pid")
    assert vtui("sleep", str(path), "a").returncode == 0
    assert vtui("wake", str(path), "a").returncode == 0

    def kinds() -> list[str]:
        if not heard.exists():
            return []
        return [json.loads(line)["event"] for line in heard.read_text().splitlines() if line.strip()]

    wait_for(lambda: len(kinds()) >= 4, timeout=20, what="four events heard")
    assert vtui("down", str(path)).returncode == 0
    assert sorted(kinds()) == ["asleep", "crashed", "recovered", "woke"], kinds()
    crashed = next(json.loads(x) for x in heard.read_text().splitlines() if '"crashed"' in x)
    assert crashed["instance"] == "a" and "SIGKILL" in crashed["message"]


def test_idle_sleep_after_puts_an_idle_instance_to_sleep(tmp_path: Path, session: str) -> None:
    inst = {**sim_instance("a", gpus=(0,)), "sleep_mode": True, "idle_sleep_after": 1}
    path = layout(tmp_path, session, [inst])
    up(path)
    wait_for(lambda: ps_rows(str(path))["a"]["state"] == "asleep", timeout=30, what="a asleep when idle")
    reasons = [e["reason"] for e in state_events(session, "a") if e["new"] == "asleep"]
    assert reasons and "idle_sleep_after" in reasons[0]
    assert vtui("wake", str(path), "a").returncode == 0
    assert vtui("down", str(path)).returncode == 0
