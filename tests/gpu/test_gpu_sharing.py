"""On a real GPU shared by two instances at gpu-memory-utilization 0.45 each: with vtui's stagger (the
second waits for the first's KV cache) both come up; a neighbour asking more than is free fails with vLLM's
"Free memory on device" error, which vtui diagnoses naming the PID that holds the memory; started at once
(two vtui sessions, no stagger) each charges the other's memory to itself, as vLLM does, and the one that
loses is diagnosed, with the other instance's PID named as the holder."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from vtui.core.state import State
from vtui.telemetry.diagnosis import diagnose
from vtui.telemetry.remedies import gpu_holders

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(600)]

MEMORY_KINDS = {"free_memory_below_utilization", "no_kv_memory", "kv_too_small_for_max_model_len", "cuda_oom"}


def _tail(sup, name: str) -> str:
    return "\n".join(sup.recent_lines(name)[-20:])


async def test_staggered_pair_fits_and_a_greedy_neighbour_is_diagnosed(gpu_count, gh, figures):
    lay = gh.layout("share", gh.sim("a", (0,), 0.45), gh.sim("b", (0,), 0.45), share=True)
    async with gh.supervising(lay) as sup:
        await sup.start()
        states = await gh.settle(sup)
        assert states == {"a": State.READY, "b": State.READY}, (_tail(sup, "a"), _tail(sup, "b"))
        got = gh.sample(sup)
        held = {n: sum(gh.held_by(got, n, 0).values()) for n in ("a", "b")}
        assert all(held.values()), got.processes
        kv = {n: gh.kv_gib(sup.recent_lines(n)) for n in ("a", "b")}
        # staggered, b's profile saw no growth from a: the same KV budget (within allocator rounding)
        assert kv["a"] and kv["b"] and abs(kv["a"] - kv["b"]) < 0.5, kv
        figures.record(
            "shared_staggered",
            held_gib={n: round(v / gh.GIB, 2) for n, v in held.items()},
            kv_gib=kv,
            gpu0_used_gib=round(got.gpus[0].memory_used / gh.GIB, 2),
            gpu0_total_gib=round(got.gpus[0].memory_total / gh.GIB, 2),
        )

        # b again, now asking 0.6 of the GPU while a holds 0.45: vLLM's start check fails it (forced past
        # vtui's own check before the launch, which would refuse it: test_gpu_preflight.py)
        greedy = sup.layout.instance("b").with_flags({"gpu-memory-utilization": 0.6})
        await sup.restart("b", dataclasses.replace(greedy, force_start=True))
        states = await gh.settle(sup)
        assert states["a"] is State.READY and states["b"] in (State.CRASHED, State.FAILED), _tail(sup, "b")
        got = gh.sample(sup)
        problems = diagnose(
            sup.recent_lines("b"), gpu=got, gpu_indices=[0], instance="b", own_pids=sup.pids_of("b")
        )
        kinds = [p.kind for p in problems]
        assert "free_memory_below_utilization" in kinds, (kinds, _tail(sup, "b"))
        problem = problems[kinds.index("free_memory_below_utilization")]
        a_pids = set(gh.held_by(got, "a", 0))
        assert a_pids and a_pids <= set(problem.pids), (problem.pids, a_pids)
        assert "instance 'a'" in problem.explanation
        figures.record(
            "shared_greedy_neighbour",
            message=problem.message,
            explanation=problem.explanation,
            named_pids=list(problem.pids),
            a_holder_pids=sorted(a_pids),
            fix=dict(problem.fix or {}),
        )


async def test_started_at_once_one_loses_and_is_diagnosed_with_the_holder_named(gpu_count, gh, figures):
    # two vtui sessions, so nothing staggers them; a slower startup widens the profile window as a real
    # model load does
    one = gh.layout("once1", gh.sim("x", (0,), 0.45, scale=2.0))
    two = gh.layout("once2", gh.sim("y", (0,), 0.45, scale=2.0))
    async with gh.supervising(one) as s1, gh.supervising(two) as s2:
        await asyncio.gather(s1.start(), s2.start())
        states = {**await gh.settle(s1), **await gh.settle(s2)}
        ready = [n for n, s in states.items() if s is State.READY]
        lost = [n for n, s in states.items() if s in (State.CRASHED, State.FAILED)]
        figures.record(
            "shared_at_once",
            states={n: s.value for n, s in states.items()},
            kv_gib={"x": gh.kv_gib(s1.recent_lines("x")), "y": gh.kv_gib(s2.recent_lines("y"))},
        )
        assert len(ready) == 1 and len(lost) == 1, (states, _tail(s1, "x"), _tail(s2, "y"))
        winner, loser = ready[0], lost[0]
        wsup, lsup = (s1, s2) if winner == "x" else (s2, s1)
        got = gh.sample(s1, s2)
        problems = diagnose(
            lsup.recent_lines(loser), gpu=got, gpu_indices=[0], instance=loser, own_pids=lsup.pids_of(loser)
        )
        kinds = [p.kind for p in problems]
        assert MEMORY_KINDS & set(kinds), (kinds, _tail(lsup, loser))
        holders = gpu_holders(got, [0], instance=loser)
        winner_pids = set(gh.held_by(got, winner, 0))
        assert winner_pids and winner_pids <= {p.pid for p in holders if p.instance == winner}, holders
        assert winner_pids <= wsup.pids_of(winner)
        figures.record(
            "shared_at_once",
            winner=winner,
            loser=loser,
            diagnosis=kinds,
            messages=[p.message for p in problems],
            named_holders=[(p.pid, p.instance) for p in holders],
            loser_log_tail=lsup.recent_lines(loser)[-6:],
        )
