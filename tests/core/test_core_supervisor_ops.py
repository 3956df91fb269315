"""Operations of one instance through its queue, on real processes (the fake engine): restarts asked
together never leave the flags the supervisor reports apart from the flags the process runs."""

from __future__ import annotations

import asyncio
import dataclasses
import socket

import psutil
import pytest

from vtui.core.model import InstanceSpec, Layout, RestartPolicy, SessionSpec
from vtui.core.refusals import OperationConflict, OperationSuperseded, PreflightError, RestartReverted
from vtui.core.runstate import PendingOperation, RunStore
from vtui.core.state import State
from vtui.supervisor.launcher import OsLauncher
from vtui.supervisor.supervisor import Supervisor

from .conftest import fake_spec


def supervisor(session: str, *specs) -> Supervisor:
    return Supervisor(
        Layout(SessionSpec(name=session), tuple(specs)),
        launcher=OsLauncher(grace=3),
        health_interval=0.1,
        poll_interval=0.05,
    )


async def ready(session: str, spec: InstanceSpec) -> Supervisor:
    """A supervisor of `spec` alone, started and READY."""
    sup = supervisor(session, spec)
    await sup.start()
    assert (await sup.wait_settled(timeout=15)) == {"a": State.READY}
    return sup


def setting(key: str, value: object):
    return lambda s: s.with_flags({key: value})


def running_flags(pid: int) -> dict[str, str]:
    argv = psutil.Process(pid).cmdline()
    return {a[2:]: argv[i + 1] for i, a in enumerate(argv) if a.startswith("--max-num")}


async def later(delay: float, coro):
    await asyncio.sleep(delay)
    return await coro


async def test_restarts_asked_together_run_one_flag_set_and_report_it(session_name):
    spec = fake_spec("a")
    sup = await ready(session_name, spec)
    for round_, gap in enumerate((0.0, 0.01, 0.05)):
        answers = await asyncio.gather(
            sup.restart("a", change=setting("max-num-seqs", 10 + round_)),
            later(gap, sup.restart("a", change=setting("max-num-batched-tokens", 100 + round_))),
            later(gap, sup.restart("a", change=setting("max-num-seqs", 20 + round_), label="fix")),
        )
        assert (await sup.wait_settled(timeout=15)) == {"a": State.READY}
        status = sup.status()[0]
        record = RunStore().load(session_name, "a")
        assert record is not None and status.pid == record.pid
        flags = {k: str(v) for k, v in status.spec.flags.items() if k.startswith("max-num")}
        assert flags == {k: str(v) for k, v in record.flags.items() if k.startswith("max-num")}
        assert running_flags(status.pid) == flags, f"round {round_}"
        # the two that came second were one restart, both changes applied, the newest last
        assert answers[1] == answers[2] == dict(status.spec.flags)
        assert (
            answers[2]["max-num-seqs"] == 20 + round_ and answers[2]["max-num-batched-tokens"] == 100 + round_
        )
    await sup.close(stop_instances=True)


async def test_a_stop_during_a_restart_wins_and_the_waiting_restart_is_told(session_name):
    spec = fake_spec("a", startup_delay=0.3)
    sup = await ready(session_name, spec)
    first = asyncio.ensure_future(sup.restart("a", change=setting("max-num-seqs", 8)))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(sup.restart("a", change=setting("max-num-seqs", 9)))
    await asyncio.sleep(0)
    await sup.stop(["a"])
    with pytest.raises(OperationSuperseded):
        await second
    with pytest.raises(OperationSuperseded):  # its start was cut short by the stop
        await first
    assert sup.status()[0].state is State.STOPPED
    assert RunStore().load(session_name, "a") is None
    assert sup.status()[0].spec.flags.get("max-num-seqs") == 8  # what the first applied; 9 never ran
    await sup.close(stop_instances=True)


async def test_status_shows_what_runs_and_what_waits_and_a_stop_refuses_a_start(session_name):
    spec = fake_spec("a", startup_delay=0.2)
    sup = await ready(session_name, spec)
    restart = asyncio.ensure_future(sup.restart("a"))
    await asyncio.sleep(0)
    sleep_ = asyncio.ensure_future(sup.restart("a", label="rollback"))
    await asyncio.sleep(0)
    status = sup.status()[0]
    assert (status.operation, status.waiting) == ("restart", "rollback")
    stop = asyncio.ensure_future(sup.stop(["a"]))
    await asyncio.sleep(0)
    with pytest.raises(OperationConflict, match="being stopped"):
        await sup.start(["a"])
    await stop
    await asyncio.gather(restart, sleep_, return_exceptions=True)
    status = sup.status()[0]
    assert status.state is State.STOPPED and (status.operation, status.waiting) == (None, None)
    await sup.close(stop_instances=True)


def test_the_restart_change_is_applied_to_the_flags_found_when_it_runs():
    spec = fake_spec("a", max_num_seqs=4)
    changed = setting("max-num-batched-tokens", 64)(spec)
    assert changed.flags == {"max-num-seqs": 4, "max-num-batched-tokens": 64}
    assert dataclasses.replace(changed, flags={}).flags == {}


async def test_new_flags_that_do_not_reach_ready_go_back_to_the_flags_before(session_name):
    spec = fake_spec("a", max_num_seqs=4)
    sup = await ready(session_name, dataclasses.replace(spec, restart=RestartPolicy("never")))
    with pytest.raises(RestartReverted, match="did not reach READY") as caught:
        await sup.restart("a", change=setting("fail-startup", "no KV memory"), fallback=True)
    assert caught.value.flags == {"max-num-seqs": 4}
    status = sup.status()[0]
    assert status.state is State.READY and status.spec.flags == {"max-num-seqs": 4}
    assert running_flags(status.pid) == {"max-num-seqs": "4"}
    await sup.close(stop_instances=True)


async def test_new_flags_on_a_taken_port_are_refused_before_anything_stops(session_name):
    spec = fake_spec("a")
    sup = await ready(session_name, spec)
    pid = sup.status()[0].pid
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PreflightError, match=f"port {port} is already in use"):
            await sup.restart("a", dataclasses.replace(spec, port=port))
    status = sup.status()[0]
    assert status.state is State.READY and status.pid == pid and status.spec == spec
    await sup.close(stop_instances=True)


async def test_a_restart_a_killed_supervisor_left_half_done_is_finished_by_the_next(session_name):
    spec = fake_spec("a", max_num_seqs=4)
    first = await ready(session_name, spec)
    # what a supervisor killed between the stop and the start of a restart leaves: the intent, no process
    await first.stop(["a"])
    await first.close()
    RunStore().save_operation(
        PendingOperation(session_name, "a", "fix", 0.0, {"max-num-seqs": 16}, {"max-num-seqs": 4})
    )
    second = supervisor(session_name, spec)
    await second.adopt()
    assert second.status()[0].operation == "fix (resumed)"
    assert (await second.wait_settled(timeout=15)) == {"a": State.READY}
    status = second.status()[0]
    assert status.spec.flags == {"max-num-seqs": 16}
    assert running_flags(status.pid) == {"max-num-seqs": "16"}
    assert RunStore().load_operation(session_name, "a") is None
    await second.close(stop_instances=True)


async def test_a_relaunch_after_a_crash_checks_its_port_as_a_start_does(session_name):
    policy = RestartPolicy("on-failure", max_restarts=3, backoff_initial=1.0)
    spec = dataclasses.replace(fake_spec("a", exit_after=0.5), restart=policy)
    sup = supervisor(session_name, spec)
    await sup.start()
    deadline = asyncio.get_running_loop().time() + 15
    while sup.status()[0].state is not State.BACKOFF:  # it ran, exited by itself, waits to relaunch
        assert asyncio.get_running_loop().time() < deadline, sup.status()[0]
        await asyncio.sleep(0.02)
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", spec.port))
        taken.listen()
        assert (await sup.wait_settled(timeout=15)) == {"a": State.FAILED}
    assert f"port {spec.port} is already in use" in (sup.status()[0].last_error or "")
    await sup.close(stop_instances=True)
