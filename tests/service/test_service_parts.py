"""The session service's collaborators, each alone with stand-ins for the others: the persisted state
(`persisted.ServiceState`), the notifications a state change makes (`notifications.Notifications`), and
what the event hub does with a state change (`eventhub.EventHub`: flag history, facts, the scrape loops)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from vtui.core.events import StateChanged
from vtui.core.model import InstanceSpec
from vtui.core.pending import PendingEdits
from vtui.core.state import State
from vtui.service.broadcast import Broadcaster
from vtui.service.eventhub import EventHub
from vtui.service.notifications import Notifications
from vtui.service.persisted import FLAG_HISTORY, ServiceState
from vtui.supervisor import notify


def _state(path: Path, saves: list[int] | None = None) -> ServiceState:
    """A ServiceState whose saves are written at once (the service runs them in a thread, later)."""

    def spawn(coro: Any) -> None:
        if saves is not None:
            saves.append(1)
        asyncio.run(coro)

    return ServiceState(path, PendingEdits(), spawn, print)


def test_the_state_survives_a_successor_and_an_unreadable_file_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "s.service.json"
    first = _state(path)
    first.facts["a"] = {"kv_cache_tokens": 1000}
    first.launched("a", 1.0, {"max-model-len": 4096, "api-key": "secret"})
    first.set_attached_up({"ext"}, up=True)  # saved with the rest
    second = _state(path)
    second.load()
    assert second.facts == {"a": {"kv_cache_tokens": 1000}} and second.attached_up == {"ext"}
    (entry,) = second.flag_history["a"]
    assert entry["flags"]["max-model-len"] == 4096 and entry["flags"]["api-key"] != "secret"  # masked
    assert "secret" not in path.read_text()
    path.write_text("{not json")
    third = _state(path)
    third.load()
    assert third.facts == {} and third.flag_history == {} and third.attached_up == set()


def test_the_flag_history_is_bounded_and_an_outcome_is_set_once(tmp_path: Path) -> None:
    saves: list[int] = []
    state = _state(tmp_path / "x.json", saves)
    for i in range(FLAG_HISTORY + 5):
        state.launched("a", float(i), {"n": i})
    history = state.flag_history["a"]
    assert len(history) == FLAG_HISTORY and history[0]["flags"] == {"n": 5}
    state.ended("a", "crashed")
    state.ended("a", "ready")  # the outcome of that launch is said already
    assert history[-1]["outcome"] == "crashed"
    saves.clear()
    state.set_attached_up({"ext"}, up=False)  # not up: nothing changes, nothing written
    assert saves == []


class _Notifier:
    def __init__(self) -> None:
        self.told: list[notify.NotifyEvent] = []
        self.closed: list[float | None] = []

    def notify(self, event: notify.NotifyEvent) -> bool:
        self.told.append(event)
        return True

    def close(self, wait: float | None = None) -> None:
        self.closed.append(wait)


def _instance(max_restarts: int = 2, attempt: int = 0) -> Any:
    spec = SimpleNamespace(restart=SimpleNamespace(max_restarts=max_restarts))
    return SimpleNamespace(spec=spec, attempt=attempt, restarts=attempt, sleep_level=1)


def _change(old: State, new: State, name: str = "a") -> StateChanged:
    return StateChanged(name, old, new, 5.0, reason="why")


def test_notifications_say_each_kind_of_change_once() -> None:
    notifier = _Notifier()
    instances = {"a": _instance(attempt=2)}
    tell = Notifications("s", lambda: instances, notifier)  # type: ignore[arg-type]
    for old, new in [
        (State.READY, State.UNHEALTHY),  # trouble: nothing said yet
        (State.UNHEALTHY, State.READY),  # recovered
        (State.READY, State.READY),  # nothing
        (State.READY, State.CRASHED),
        (State.CRASHED, State.FAILED),  # the budget (2 of 2) is spent
        (State.READY, State.ASLEEP),
        (State.ASLEEP, State.WAKING),
        (State.WAKING, State.READY),
    ]:
        tell.tell(_change(old, new))
    kinds = [e.kind for e in notifier.told]
    assert kinds == [
        notify.RECOVERED,
        notify.CRASHED,
        notify.RESTART_BUDGET_EXHAUSTED,
        notify.ASLEEP,
        notify.WOKE,
    ]
    assert tell.troubled == {"a"}  # crashed, not READY since
    tell.tell(_change(State.STOPPING, State.STOPPED))
    assert tell.troubled == set()
    replacement = _Notifier()
    tell.replace(replacement)  # type: ignore[arg-type]
    assert notifier.closed == [0]
    tell.tell(_change(State.READY, State.CRASHED))
    assert len(replacement.told) == 1 and len(notifier.told) == 5


class _Supervisor:
    def __init__(self, inst: Any) -> None:
        self.instances = {"a": inst}
        self.layout = SimpleNamespace(names=lambda: ("a",))


def test_a_state_change_records_its_launch_its_facts_and_syncs_the_scrapers(tmp_path: Path) -> None:
    spec = InstanceSpec("a", "m", 8000, flags={"max-model-len": 4096})
    inst = SimpleNamespace(spec=spec, run_lines=["INFO x"], log_path=None)
    spawned: list[Any] = []
    state = _state(tmp_path / "s.json")
    synced: list[int] = []
    tell = Notifications("s", lambda: {}, None)
    hub = EventHub(
        _Supervisor(inst),  # type: ignore[arg-type]
        Broadcaster(),
        state,
        tell,
        spawn=lambda coro: spawned.append(coro) or coro.close(),
        on_state=lambda: synced.append(1),
    )
    hub.on_event(_change(State.STOPPED, State.STARTING))
    hub.on_event(_change(State.STARTING, State.READY))
    assert state.flag_history["a"] == [{"at": 5.0, "flags": {"max-model-len": 4096}, "outcome": "ready"}]
    assert "a" in state.facts and synced == [1, 1] and spawned == []
    hub.on_event(
        StateChanged("a", State.STOPPED, State.STARTING, 6.0, reason="adopted")
    )  # no launch  # adopted: no launch
    assert len(state.flag_history["a"]) == 1
    del state.facts["a"]
    hub.on_event(StateChanged("a", State.UNHEALTHY, State.READY, 7.0))  # no facts: read from the log
    assert len(spawned) == 1
    assert [e["kind"] for e in hub.history.last(10)] == ["state"] * 4
    assert json.loads((tmp_path / "s.json").read_text())["facts"].keys() == {"a"}  # written when learnt


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_idle_watch_waits_a_whole_grace_after_the_last_activity() -> None:
    from vtui.service.idle import IdleWatch

    clock, state = _Clock(), {"busy": False, "clients": 0}
    watch = IdleWatch(30.0, lambda: state["busy"], lambda: state["clients"], clock=clock)
    clock.now += 29.9
    assert not watch.due()
    state["clients"] = 1  # a client attached: the grace starts again when it leaves
    clock.now += 60
    assert not watch.due()
    state["clients"] = 0
    clock.now += 10
    watch.touch()  # its connection ended now
    clock.now += 29.9
    assert not watch.due()
    state["busy"] = True  # an instance runs: never idle
    clock.now += 100
    assert not watch.due()
    state["busy"] = False
    clock.now += 30
    assert watch.due()


def test_the_session_log_says_what_ran_and_when(capsys: Any) -> None:
    """The hub journals state changes, the operation queues and notices (the supervisor's stderr is its
    session log); log batches and phases stay out of it."""
    from vtui.core.events import LogLines, Notice, OperationChanged
    from vtui.service.eventhub import journal

    journal(StateChanged("a", State.READY, State.STOPPING, 1.0))
    journal(OperationChanged("a", "stop", "restart", 1.0))
    journal(OperationChanged("a", None, None, 2.0))
    journal(Notice("a", "warning", "a: 3 request(s) still in flight after 2s were cut"))
    journal(LogLines("a", ("INFO many lines",)))
    lines = [line.split(": ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    assert lines == [
        "a: ready -> stopping",
        "a: operation stop, restart waiting",
        "a: operation none",
        "warning: a: 3 request(s) still in flight after 2s were cut",
    ]
