"""The per-instance operation queue's table (`supervisor.opqueue`): joined, merged, queued, refused,
superseded — decided by the table, never by timing."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from vtui.core.model import InstanceSpec
from vtui.core.refusals import OperationConflict, OperationSuperseded
from vtui.supervisor.opqueue import Operation, OperationQueue


class Gate:
    """A runner that records what ran and holds until released."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.release = asyncio.Event()

    def runner(self, what: str):
        async def run(op: Operation) -> str:
            self.ran.append(what)
            await self.release.wait()
            return what

        return run


def spec(**flags: object) -> InstanceSpec:
    return InstanceSpec(name="a", model="m", port=8000, flags=dict(flags))  # type: ignore[arg-type]


def set_flag(key: str, value: object):
    return lambda s: dataclasses.replace(s, flags={**s.flags, key: value})


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_one_runs_the_next_waits_and_runs_after_it():
    gate, changes = Gate(), []
    queue = OperationQueue("a", on_change=lambda: changes.append(queue.snapshot()))
    first = queue.submit("restart", gate.runner("first"))
    second = queue.submit("sleep", gate.runner("second"))
    await settle()
    assert gate.ran == ["first"] and queue.snapshot() == ("restart", "sleep")
    gate.release.set()
    assert await first.future == "first" and await second.future == "second"
    assert gate.ran == ["first", "second"] and queue.idle
    assert changes[-1] == (None, None) and ("restart", "sleep") in changes


async def test_two_waiting_restarts_are_one_restart_with_both_changes_newest_last():
    gate = Gate()
    queue = OperationQueue("a")
    running = queue.submit("restart", gate.runner("running"))
    seen: list[InstanceSpec] = []

    async def restart(op: Operation) -> dict:
        assert op.change is not None
        new = op.change(spec(x=0))
        seen.append(new)
        return dict(new.flags)

    one = queue.submit("restart", restart, change=set_flag("x", 1))
    two = queue.submit("restart", restart, change=set_flag("y", 2))
    three = queue.submit("restart", restart, change=set_flag("x", 3))
    assert one is two is three and one.callers == 3 and one is not running
    gate.release.set()
    assert await one.future == {"x": 3, "y": 2}
    assert len(seen) == 1  # one restart served all three callers


async def test_a_start_joins_a_running_restart_and_a_waiting_start_becomes_a_restart():
    gate = Gate()
    queue = OperationQueue("a")
    restart = queue.submit("restart", gate.runner("restart"))
    assert queue.submit("start", gate.runner("start")) is restart
    queue2 = OperationQueue("b")
    sleep = queue2.submit("sleep", gate.runner("sleep"))
    start = queue2.submit("start", gate.runner("start"))
    assert queue2.submit("restart", gate.runner("restart"), change=set_flag("x", 1)) is start
    assert start.kind == "restart" and start.callers == 2 and sleep is not start
    gate.release.set()
    assert await restart.future == "restart" and await start.future == "restart"


async def test_a_stop_supersedes_what_waits_and_cuts_the_running_launch_short():
    gate, preempted = Gate(), []
    queue = OperationQueue("a", preempt=lambda: preempted.append(True))
    running = queue.submit("restart", gate.runner("restart"))
    waiting = queue.submit("restart", gate.runner("second"), change=set_flag("x", 1))
    stop = queue.submit("stop", gate.runner("stop"))
    assert preempted == [True] and queue.stop_waiting
    with pytest.raises(OperationSuperseded, match="a stop came first"):
        await waiting.future
    assert queue.submit("stop", gate.runner("stop again")) is stop  # joined
    with pytest.raises(OperationConflict, match="being stopped"):
        queue.submit("restart", gate.runner("refused"))
    gate.release.set()
    assert await running.future == "restart" and await stop.future == "stop"
    assert gate.ran == ["restart", "stop"]


async def test_a_users_stop_refuses_everything_else_but_waits_behind_a_watchdog_stop():
    gate = Gate()
    queue = OperationQueue("a")
    user_stop = queue.submit("stop", gate.runner("stop"))
    for kind in ("start", "restart", "sleep", "wake"):
        with pytest.raises(OperationConflict, match="being stopped"):
            queue.submit(kind, gate.runner(kind))  # type: ignore[arg-type]
    gate.release.set()
    await user_stop.future
    gate2 = Gate()
    queue2 = OperationQueue("b")
    watchdog = queue2.submit("stop", gate2.runner("watchdog"), origin="policy", label="watchdog restart")
    mine = queue2.submit("stop", gate2.runner("user stop"))
    assert mine is not watchdog and queue2.snapshot() == ("watchdog restart", "stop")
    gate2.release.set()
    await mine.future
    assert gate2.ran == ["watchdog", "user stop"]


async def test_a_policy_acts_only_on_an_idle_instance():
    gate = Gate()
    queue = OperationQueue("a")
    queue.submit("restart", gate.runner("user"))
    with pytest.raises(OperationConflict, match="restart running"):
        queue.submit("start", gate.runner("policy"), origin="policy", label="policy restart")
    gate.release.set()


async def test_a_different_kind_waiting_refuses_a_third():
    gate = Gate()
    queue = OperationQueue("a")
    queue.submit("restart", gate.runner("restart"))
    queue.submit("sleep", gate.runner("sleep"))
    with pytest.raises(OperationConflict, match="sleep waiting"):
        queue.submit("restart", gate.runner("restart 2"))
    gate.release.set()


async def test_every_caller_gets_the_failure_and_a_caller_going_away_cancels_nothing():
    queue = OperationQueue("a")
    release = asyncio.Event()

    async def fails(op: Operation) -> None:
        await release.wait()
        raise RuntimeError("no KV memory")

    op = queue.submit("restart", fails)
    assert queue.submit("start", fails) is op
    waiter = asyncio.ensure_future(asyncio.shield(op.future))
    await settle()
    waiter.cancel()  # a client that disconnects
    release.set()
    with pytest.raises(RuntimeError, match="no KV memory"):
        await op.future
    assert op.task is not None and op.task.done() and not op.task.cancelled() and queue.idle
