"""Layout file -> load_layout -> Supervisor -> real sim engines: three instances come up READY, the two
sharing a GPU one after the other; two that oversubscribe a shared GPU fail in vLLM's words, and the
diagnosis names the problem with a fix."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

import psutil
import pytest

from vtui.core.events import PhaseChanged, StateChanged
from vtui.core.state import Phase, State
from vtui.layouts import load_layout
from vtui.supervisor.launcher import OsLauncher
from vtui.supervisor.preflight import preflight
from vtui.telemetry.diagnosis import diagnose

from .conftest import Recorder, assert_valid_path, marked, sim_instance, supervisor, write_layout

pytestmark = pytest.mark.timeout(60)


async def test_three_sims_ready_and_the_shared_gpu_pair_starts_in_turn(tmp_path: Path, session: str) -> None:
    path = write_layout(
        tmp_path,
        session,
        [
            sim_instance("first", gpus=(0,), gpu_memory_utilization=0.45),
            sim_instance("second", gpus=(0,), gpu_memory_utilization=0.45),
            sim_instance("other", gpus=(1,)),
        ],
        sharing=True,
    )
    layout = load_layout(path)
    assert layout.session.allow_gpu_sharing and [s.engine for s in layout.instances] == ["sim"] * 3
    sup = supervisor(layout)
    rec = Recorder(sup)
    try:
        await sup.start()
        states = await sup.wait_settled(timeout=30)
        assert states == {"first": State.READY, "second": State.READY, "other": State.READY}, {
            s.name: s.last_error for s in sup.status()
        }
        pids = {s.name: s.pid for s in sup.status()}
        assert all(pids.values()) and len(set(pids.values())) == 3

        # The first's KV cache is allocated (its KV_CACHE phase) before the second starts.
        kv_first = rec.index(
            lambda e: e.instance == "first" and isinstance(e, PhaseChanged) and e.phase is Phase.KV_CACHE,
            "first's KV_CACHE phase",
        )
        start_second = rec.index(
            lambda e: isinstance(e, StateChanged) and e.instance == "second" and e.new is State.STARTING
        )
        assert kv_first < start_second, (
            "the second instance on GPU 0 started before the first allocated its KV cache"
        )
        for name in ("first", "second", "other"):
            changes = rec.states(name)
            assert_valid_path(changes)
            assert [e.new for e in changes] == [State.STARTING, State.READY]
    finally:
        await sup.close(stop_instances=True)
    assert not marked(session + "/")


async def test_oversubscribed_shared_gpu_fails_with_free_memory_wording(tmp_path: Path, session: str) -> None:
    path = write_layout(
        tmp_path,
        session,
        [
            sim_instance("big-a", gpus=(3,), gpu_memory_utilization=0.6),
            # forced past vtui's own free-memory check (tested in tests/service), so that the engine's
            # failure, its diagnosis and the suggested fix are what this test sees
            {**sim_instance("big-b", gpus=(3,), gpu_memory_utilization=0.6), "force_start": True},
        ],
        sharing=True,
    )
    sup = supervisor(load_layout(path))
    rec = Recorder(sup)
    try:
        await sup.start()
        states = await sup.wait_settled(timeout=30)
        assert states["big-a"] is State.READY
        assert states["big-b"] is State.FAILED
        status = {s.name: s for s in sup.status()}["big-b"]
        assert status.last_error is not None
        assert "Free memory on device cuda:0" in status.last_error
        assert "is less than desired GPU memory utilization (0.6" in status.last_error
        assert_valid_path(rec.states("big-b"))

        problems = diagnose(sup.recent_lines("big-b"))
        kinds = [p.kind for p in problems]
        assert "free_memory_below_utilization" in kinds, kinds
        problem = problems[kinds.index("free_memory_below_utilization")]
        assert problem.fix is not None
        lowered = problem.fix["gpu-memory-utilization"]
        assert isinstance(lowered, float) and 0 < lowered <= 0.4  # 0.6 of the GPU is taken by big-a

        # The suggested fix, applied as a restart with changed flags, brings it up beside big-a.
        spec = status.spec.with_flags({"gpu-memory-utilization": lowered})
        await sup.restart("big-b", spec)
        assert (await sup.wait_settled(["big-b"], timeout=30))["big-b"] is State.READY
    finally:
        await sup.close(stop_instances=True)
    assert not marked(session + "/")


async def test_startup_phases_precede_ready_whatever_the_tick_cadence(tmp_path: Path, session: str) -> None:
    layout = load_layout(write_layout(tmp_path, session, [sim_instance("solo", gpus=(0,))]))
    sup = supervisor(layout, poll_interval=10.0)  # log ticks rarer than health probes (a slow machine)
    rec = Recorder(sup)
    try:
        await sup.start()
        assert (await sup.wait_settled(timeout=30))["solo"] is State.READY
        phases = [e.phase for e in rec.events if isinstance(e, PhaseChanged)]
        ready = rec.index(lambda e: isinstance(e, StateChanged) and e.new is State.READY)
        kv = rec.index(lambda e: isinstance(e, PhaseChanged) and e.phase is Phase.KV_CACHE, "KV_CACHE phase")
        assert kv < ready, phases
    finally:
        await sup.close(stop_instances=True)


class SlowSpawnLauncher(OsLauncher):
    """An OsLauncher whose spawn takes 0.3 s longer (a loaded machine: this one measured 0.33 s a spawn)."""

    def spawn(self, *args, **kwargs):
        time.sleep(0.3)
        return super().spawn(*args, **kwargs)


async def test_event_loop_stays_responsive_while_instances_spawn(tmp_path: Path, session: str) -> None:
    layout = load_layout(
        write_layout(tmp_path, session, [sim_instance(f"s{i}", gpus=(i,)) for i in range(4)])
    )
    # health_interval 30: no probe runs during start(), so only the spawns can hold the loop.
    sup = supervisor(layout, launcher=SlowSpawnLauncher(grace=3), health_interval=30)
    lags: list[float] = []

    async def heartbeat() -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.01)
            lags.append(time.monotonic() - t - 0.01)

    beat = asyncio.create_task(heartbeat())
    try:
        await asyncio.sleep(0.05)
        await sup.start()
        await asyncio.sleep(0.05)  # let the heartbeat record a stretch that ended just now
        assert all(s.pid for s in sup.status())
        assert max(lags) < 0.5, f"the event loop was held for {max(lags):.2f} s at once"
    finally:
        beat.cancel()
        await sup.close(stop_instances=True)


async def test_health_probes_do_not_rebuild_tls_state(
    tmp_path: Path, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = load_layout(write_layout(tmp_path, session, [sim_instance("probed", gpus=(0,))]))
    sup = supervisor(layout)
    try:
        await sup.start()
        assert (await sup.wait_settled(timeout=30))["probed"] is State.READY
        loads = []
        original = ssl.SSLContext.load_verify_locations

        def counting(self, *args, **kwargs):
            loads.append(1)
            return original(self, *args, **kwargs)

        monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
        spec = sup.layout.instance("probed")
        started = time.perf_counter()
        results = [await sup.launcher.health(spec) for _ in range(10)]
        per_probe = (time.perf_counter() - started) / 10
        assert all(results)
        assert len(loads) <= 1, (
            f"10 plain-http probes loaded the CA bundle {len(loads)} times "
            f"({per_probe * 1000:.0f} ms a probe)"
        )
    finally:
        await sup.close(stop_instances=True)


def test_preflight_does_not_ask_cores_for_sim_instances(tmp_path: Path, session: str) -> None:
    layout = load_layout(
        write_layout(tmp_path, session, [sim_instance("a", gpus=(0,)), sim_instance("b", gpus=(1,))])
    )
    result = preflight(layout, cpu_count=2)
    assert not result.problems
    assert not [w for w in result.warnings if "CPU cores" in w], result.warnings


async def test_session_gpu_memory_sizes_the_simulated_gpu(tmp_path: Path, session: str) -> None:
    path = write_layout(
        tmp_path,
        session,
        [sim_instance("small", gpus=(0,)), sim_instance("own", gpus=(1,), sim_gpu_memory_gib=40)],
    )
    path.write_text(path.read_text().replace("[session]\n", "[session]\ngpu_memory_gib = 16\n", 1))
    layout = load_layout(path)
    sup = supervisor(layout)
    try:
        await sup.start()
        assert (await sup.wait_settled(timeout=30)) == {"small": State.READY, "own": State.READY}
        cmdlines = {s.name: psutil.Process(s.pid).cmdline() for s in sup.status()}
        assert cmdlines["small"][-2:] == ["--sim-gpu-memory-gib", "16.0"]
        assert cmdlines["own"].count("--sim-gpu-memory-gib") == 1 and "40" in cmdlines["own"]
        assert "sim-gpu-memory-gib" not in sup.layout.instance("small").flags  # shown/saved as written
    finally:
        await sup.close(stop_instances=True)
