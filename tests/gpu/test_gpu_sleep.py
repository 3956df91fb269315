"""On a real GPU: vLLM's sleep mode on a sim holding real CUDA memory (`--sim-device cuda`, in its
VLLM::EngineCore child), driven as a user does (`vtui sleep`, `vtui wake`): NVML shows the weights and KV
cache freed while asleep (what the engine logged freeing, to the allocator's rounding) and back after
the wake, and the instance serves again. The sim's own sleep-cost model is off (sim-startup-scale 0), so
the times measured are vtui's command, the supervisor, HTTP and the real CUDA free / allocation."""

from __future__ import annotations

import json
import re
import statistics
import time

import pytest

from vtui.service.client import ServiceClient

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(240)]

GIB = 1 << 30
MIB = 1 << 20
FREED = re.compile(r"Sleep mode freed ([\d.]+) GiB memory")
ROUNDS = (1, 1, 2)  # sleep levels, one round each


def _logged_freed(gh, session: str, name: str, sleeps: int) -> float | None:
    """GiB the engine says its sleep number `sleeps` freed (its log line, as vLLM's gpu_worker writes it;
    waited for: the log pump may write it a moment after the sleep returned)."""
    found: list[float] = []

    def logged() -> bool:
        lines = ServiceClient(session).get(f"/logs?name={name}&n=5000")["lines"]
        found[:] = [float(m[1]) for line in lines if (m := FREED.search(line))]
        return len(found) >= sleeps

    gh.wait_until(logged, 10.0, 0.1)
    return found[sleeps - 1] if len(found) >= sleeps else None


def test_sleep_frees_the_cuda_memory_and_wake_brings_it_back(gpus, gh, figures, tmp_path):
    entry = gh.sim_entry(gpus, "s", [0], 0.4, scale=0.0, sleep_mode=True)
    path, session = gh.write_layout(tmp_path, [entry])
    gh.quiet(gpus)
    rounds: list[dict[str, object]] = []
    with gh.brought_down(path):
        up = gh.vtui("up", str(path), "--timeout", "240")
        assert up.returncode == 0, gh.said(up)
        row = gh.ps_rows(path)["s"]
        tree = gh.instance_pids(session)["s"]
        for done, level in enumerate(ROUNDS, start=1):
            awake = gpus.read().held(tree, 0)
            assert awake > 0, gpus.read().processes

            t0 = time.monotonic()
            slept = gh.vtui("sleep", str(path), "s", "--level", str(level), "--json")
            sleep_s = time.monotonic() - t0
            assert slept.returncode == 0, gh.said(slept)
            assert json.loads(slept.stdout)["state"] == "asleep", slept.stdout
            asleep = gpus.read().held(tree, 0)
            logged = _logged_freed(gh, session, "s", done)

            t0 = time.monotonic()
            woke = gh.vtui("wake", str(path), "s", "--json")
            wake_s = time.monotonic() - t0
            assert woke.returncode == 0, gh.said(woke)
            assert json.loads(woke.stdout)["state"] == "ready", woke.stdout
            back = gpus.read().held(tree, 0)
            t0 = time.monotonic()
            gh.complete(row["port"], row["model"])
            first_s = time.monotonic() - t0
            result = {
                "level": level,
                "sleep_cmd_s": round(sleep_s, 3),
                "wake_cmd_s": round(wake_s, 3),
                "first_completion_after_wake_s": round(first_s, 3),
                "held_awake_gib": round(awake / GIB, 2),
                "held_asleep_gib": round(asleep / GIB, 2),
                "held_after_wake_gib": round(back / GIB, 2),
                "freed_gib_nvml": round((awake - asleep) / GIB, 2),
                "freed_gib_logged": logged,
            }
            rounds.append(result)
            figures.record("sleep_wake", backend=gpus.kind, rounds=rounds)
            assert logged is not None and logged * GIB >= 0.5 * awake, result  # the bulk: weights + KV
            assert abs((awake - asleep) - logged * GIB) <= max(256 * MIB, 0.01 * logged * GIB), result
            assert abs(back - awake) <= 256 * MIB, result
        assert gh.ps_rows(path)["s"]["pid"] == row["pid"]  # the same process all along
    figures.record(
        "sleep_wake",
        sleep_cmd_s_median=statistics.median(r["sleep_cmd_s"] for r in rounds),
        wake_cmd_s_median=statistics.median(r["wake_cmd_s"] for r in rounds),
        sim_cost_model="off (sim-startup-scale 0): vtui, the supervisor, HTTP and the real CUDA free/allocation",
    )
