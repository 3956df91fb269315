"""The supervisor's parts one by one, on an injected clock and a fake launcher: no processes, no sleeps
for timing (`Supervisor` only wires them; tests/core drives the whole on real processes)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vtui.core.events import Notice, OperationChanged, ProcessExited, StateChanged
from vtui.core.model import InstanceSpec, Layout, RestartPolicy, SessionSpec
from vtui.core.pending import PendingEdits
from vtui.core.runstate import RunStore
from vtui.core.state import State
from vtui.supervisor.bus import EventBus
from vtui.supervisor.logfile import ExitInfo
from vtui.supervisor.membership import Membership
from vtui.supervisor.operations import Operations
from vtui.supervisor.records import Records
from vtui.supervisor.replicas import RECONCILE_EVERY_S
from vtui.supervisor.roster import Roster
from vtui.supervisor.supervisor_tick import Ticker


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def time(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds
        await asyncio.sleep(0)


class FakeLauncher:
    """The OS seam, as the tick sees it: which leaders live and how they ended."""

    def __init__(self) -> None:
        self.dead: dict[int, ExitInfo] = {}

    def alive(self, handle: Any) -> bool:
        return handle.pid not in self.dead

    def exit_info(self, handle: Any) -> ExitInfo | None:
        return self.dead.get(handle.pid)


def spec(name: str, port: int, **kw: Any) -> InstanceSpec:
    return InstanceSpec(name=name, model="m", port=port, engine="sim", **kw)


def parts(*specs: InstanceSpec, store: RunStore | None = None):
    clock, bus, events = FakeClock(), EventBus(), []
    edits = PendingEdits()
    roster = Roster(Layout(SessionSpec("parts"), specs), clock=clock, emit=bus.emit, edits=edits)
    for s in specs:
        roster.instances[s.name] = roster.new_instance(s)
    bus.subscribe(events.append)
    return SimpleNamespace(clock=clock, bus=bus, events=events, roster=roster, edits=edits)


def serving(inst: Any, pid: int) -> None:
    inst.begin_launch()
    inst.attach(SimpleNamespace(pid=pid))
    inst.on_health(True)
    assert inst.state is State.READY


def test_the_bus_tells_the_supervisors_parts_first_and_skips_a_broken_subscriber(capsys):
    bus, seen = EventBus(), []
    bus.subscribe(lambda e: seen.append(("first", e)))
    bus.subscribe(lambda e: 1 / 0)
    unsubscribe = bus.subscribe(lambda e: seen.append(("last", e)))
    bus.hook(lambda e: seen.append(("hook", e)))  # hooked after the subscribers, told before them
    bus.notice("a", "info", "hello")
    notice = Notice("a", "info", "hello")
    assert seen == [("hook", notice), ("first", notice), ("last", notice)]
    assert "event subscriber failed: ZeroDivisionError" in capsys.readouterr().err
    unsubscribe()
    unsubscribe()  # twice is harmless
    bus.emit(notice)
    assert [who for who, _ in seen] == ["hook", "first", "last", "hook", "first"]


def test_the_roster_names_instances_in_layout_order_and_refuses_unknown_ones():
    p = parts(spec("a", 8001), spec("b", 8002))
    assert p.roster.names(None) == ["a", "b"]
    assert p.roster.names(["b", "a"]) == ["a", "b"]
    with pytest.raises(KeyError, match="no instance named c in session parts"):
        p.roster.names(["a", "c"])
    assert not p.roster.active("a")
    p.roster.pending["a"] = None  # type: ignore[assignment]  # a launch not yet spawned
    assert p.roster.active("a")


def test_applying_a_spec_sets_the_layout_and_rebases_a_kept_edit():
    p = parts(spec("a", 8001, flags={"max-num-seqs": 8}))
    p.edits.set("a", {"max-num-seqs": 8, "max-model-len": 512}, {"max-num-seqs": 8})
    p.roster.restored["a"] = p.roster.layout.instances[0]
    new = p.roster.instances["a"].spec.with_flags({"max-num-seqs": 16})
    p.roster.apply_spec("a", new)
    assert p.roster.instances["a"].spec is new and p.roster.layout.instances[0] is new
    assert "a" not in p.roster.restored  # these flags start next, not the layout's
    assert p.edits.snapshot()["a"] == {"max-num-seqs": 16, "max-model-len": 512}  # the user's change kept


async def test_operations_show_in_status_and_a_stop_cancels_a_launch_not_yet_spawned():
    p = parts(spec("a", 8001))
    ops = Operations(p.roster, p.clock, p.bus.emit)
    assert ops.idle("a") and ops.status(p.roster.instances["a"]).operation is None
    release = asyncio.Event()
    launch = asyncio.create_task(release.wait())
    p.roster.pending["a"] = launch

    async def restart(_op: Any) -> None:
        await release.wait()

    ops.queue("a").submit("restart", restart, label="fix")
    status = ops.status(p.roster.instances["a"])
    assert (status.operation, status.waiting) == ("fix", None) and not ops.idle("a")
    ops.queue("a").submit("stop", restart)
    await asyncio.sleep(0)
    assert launch.cancelled()  # preempted: not worth waiting for
    assert ops.status(p.roster.instances["a"]).waiting == "stop"
    changes = [e for e in p.events if isinstance(e, OperationChanged)]
    assert changes[-1] == OperationChanged("a", "fix", "stop", p.clock.t)
    await ops.close()
    assert ops.queue("a").running is None or ops.queue("a").running.task.done()


def test_records_keep_how_a_run_ended_and_clear_it_at_ready(tmp_path: Path):
    store = RunStore(tmp_path)
    p = parts(spec("a", 8001, flags={"max-num-seqs": 8}, restart=RestartPolicy(mode="never")))
    records = Records(store, p.roster, p.clock)
    p.bus.hook(records.on_event)
    inst = p.roster.instances["a"]
    serving(inst, pid=41)
    assert store.load_outcome("parts", "a") is None
    p.clock.t += 30
    inst.on_exit(1, "exit code 1")
    outcome = store.load_outcome("parts", "a")
    assert outcome is not None and outcome.state == "crashed" and outcome.flags == {"max-num-seqs": 8}
    assert outcome.at == p.clock.t and outcome.last_error == inst.last_error
    inst.begin_launch()
    inst.attach(SimpleNamespace(pid=42))
    inst.on_health(True)
    assert store.load_outcome("parts", "a") is None  # READY: the failure is history


async def test_membership_reconciles_each_group_again_on_the_clock_and_says_a_failure():
    asked: list[str] = []
    notices: list[tuple] = []

    class Hub:
        fail = False

        def groups(self) -> list[str]:
            return ["g"]

        async def reconcile(self, group: str) -> None:
            asked.append(group)
            if self.fail:
                raise RuntimeError("router down")

    hub = Hub()
    membership = Membership(hub, {}, lambda *n: notices.append(n))  # type: ignore[arg-type]

    async def settle() -> None:
        await asyncio.gather(*membership.tasks())

    membership.tick(100.0)
    await settle()
    membership.tick(100.0 + RECONCILE_EVERY_S - 0.1)  # not yet
    await settle()
    assert asked == ["g"]
    hub.fail = True
    membership.tick(100.0 + RECONCILE_EVERY_S)
    await settle()
    assert asked == ["g", "g"]
    assert notices == [(None, "warning", "g: router membership update failed: RuntimeError('router down')")]


async def test_the_tick_sees_a_death_sweeps_and_restarts_by_the_policy_when_due():
    p = parts(spec("a", 8001, restart=RestartPolicy(mode="on-failure", backoff_initial=2.0)))
    launcher, swept, launched = FakeLauncher(), [], []
    inst = p.roster.instances["a"]
    serving(inst, pid=41)
    ops = Operations(p.roster, p.clock, p.bus.emit)
    tails = SimpleNamespace(drain=lambda _name: None)
    sweeper = SimpleNamespace(after_crash=lambda name, handle: swept.append((name, handle.pid)))
    membership = SimpleNamespace(tick=lambda _now: None)

    async def launch_when_clear(name: str, *, initial: bool) -> None:
        launched.append((name, initial, p.clock.t))
        p.roster.pending.pop(name, None)

    launches = SimpleNamespace(launch_when_clear=launch_when_clear)
    stops = SimpleNamespace(watchdog_stops={}, grace=None)
    sleeps = SimpleNamespace(idle_sleeps={})
    ticker = Ticker(
        p.roster, ops, tails, sweeper, membership, launches, stops, sleeps,  # type: ignore[arg-type]
        launcher, p.clock, p.bus.emit, p.bus.notice, rescales=set(), interval=0.2,
    )  # fmt: skip
    await ticker.tick()
    assert inst.state is State.READY and not swept
    launcher.dead[41] = ExitInfo(-9, signal=9)
    await ticker.tick()
    exited = [e for e in p.events if isinstance(e, ProcessExited)]
    assert exited == [ProcessExited("a", 41, -9, p.clock.t)]
    assert inst.state is State.BACKOFF and swept == [("a", 41)]
    await ticker.tick()
    assert launched == []  # the backoff has not passed
    p.clock.t = inst.next_restart_at
    await ticker.tick()
    assert p.roster.pending["a"] is ops.queue("a").running.task
    assert ops.status(inst).operation == "policy restart"
    await p.roster.pending["a"]
    assert launched == [("a", False, p.clock.t)]
    states = [(e.old, e.new) for e in p.events if isinstance(e, StateChanged)]
    assert states[-2:] == [(State.READY, State.CRASHED), (State.CRASHED, State.BACKOFF)]
