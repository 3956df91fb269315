"""Where the supervisor's events go in the session service: kept (`history.EventHistory`, for
`GET /events`), sent on the feed (a status first where the event changes one), told to the notifier,
and what a state change leaves behind: the launch's flags and outcome, the startup facts read from the
run's log (persisted: `persisted.ServiceState`), the scrape loops brought in line. The instances'
statuses as the API sends them are made here too."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from vtui.core.events import (
    Event,
    LogLines,
    Notice,
    OperationChanged,
    PhaseChanged,
    ProcessExited,
    StateChanged,
    gone,
)
from vtui.core.state import State
from vtui.service.broadcast import Broadcaster
from vtui.service.history import EventHistory
from vtui.service.notifications import Notifications
from vtui.service.persisted import ServiceState
from vtui.service.service_base import log
from vtui.service.wire import encode_event, encode_facts, encode_status
from vtui.supervisor.attached import Attached
from vtui.supervisor.logfile import read_tail
from vtui.supervisor.replicas import describe
from vtui.supervisor.supervisor import Supervisor


class EventHub:
    def __init__(
        self,
        supervisor: Supervisor,
        feed: Broadcaster,
        state: ServiceState,
        notifications: Notifications,
        spawn: Callable[[Coroutine[Any, Any, Any]], Any],
        on_state: Callable[[], None] = lambda: None,
        history: EventHistory | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.feed = feed
        self.state = state
        self.notifications = notifications
        self._spawn = spawn
        self._after_state = on_state  # what else follows a state change (the scrape loops)
        self.history = history if history is not None else EventHistory()  # bounded in count and bytes
        # the layout file's instances, replica groups expanded (others: adopted leftovers)
        self.file_names: set[str] = set(supervisor.layout.names())

    def on_event(self, event: Event) -> None:
        encoded = encode_event(event)
        journal(event)
        self.history.append(encoded)  # a log batch: its last lines only (`history.EventHistory`)
        if isinstance(event, LogLines):
            self.feed.hold_lines(event.instance, event.lines)
            return
        if isinstance(event, (StateChanged, PhaseChanged, ProcessExited, OperationChanged)) or gone(
            event, self.supervisor.instances
        ):
            self.broadcast_status()  # first: a client hearing of the event already has the snapshot
        self.feed.broadcast({"type": "event", "event": encoded})
        if isinstance(event, StateChanged):
            self._on_state(event)
            self.notifications.tell(event)

    def _on_state(self, event: StateChanged) -> None:
        inst = self.supervisor.instances.get(event.instance)
        if inst is None:
            return
        self.state.flag_history.setdefault(event.instance, [])
        if event.new is State.STARTING and event.reason != "adopted":
            self.state.launched(event.instance, event.at, inst.spec.flags)
        elif event.new is State.READY and event.old is State.STARTING and event.reason != "adopted":
            # a launch came up: its run's lines hold the startup (a wake's or a recovery's do not)
            self.state.ended(event.instance, "ready", save=False)
            self.remember_facts(event.instance, list(inst.run_lines))
        elif event.new in (State.CRASHED, State.FAILED):
            self.state.ended(event.instance, event.new.value)
        elif (
            event.new is State.READY
            and event.instance not in self.state.facts
            and not isinstance(inst, Attached)
        ):
            self._spawn(self.facts_from_log(event.instance))  # adopted, nothing persisted
        self._after_state()

    def remember_facts(self, name: str, lines: list[str]) -> None:
        from vtui.telemetry.startup_log import parse_startup

        self.state.facts[name] = encode_facts(parse_startup(lines))
        self.state.save()
        self.feed.broadcast({"type": "facts", "instance": name, "facts": self.state.facts[name]})

    async def facts_from_log(self, name: str) -> None:
        inst = self.supervisor.instances.get(name)
        if inst is None or inst.log_path is None:
            return
        lines = await asyncio.to_thread(read_tail, inst.log_path, 5000)
        self.remember_facts(name, lines)

    def edits_changed(self, name: str) -> None:
        """A kept flag edit changed (a client's `/pending`, or its rebase onto flags applied since):
        persisted, and sent to every feed."""
        self.state.save()
        edits = self.supervisor.edits
        self.feed.broadcast(
            {
                "type": "pending",
                "instance": name,
                "flags": edits.get(name),
                "conflicts": [c.to_dict() for c in edits.conflicts(name)],
            }
        )

    def broadcast_status(self) -> None:
        if self.feed:
            self.feed.broadcast({"type": "status", "instances": self.statuses()})

    def statuses(self) -> list[dict[str, Any]]:
        return [
            encode_status(
                st,
                in_layout=st.name in self.file_names,
                facts=self.state.facts.get(st.name),
                **describe(st.spec, self.supervisor.routers),
            )
            for st in self.supervisor.status()
        ]


def journal(event: Event) -> None:
    """What the supervisor did, one line in the session log: state changes, each instance's operation
    queue (what runs, what waits) and notices. Enough to tell afterwards where a slow stop spent its
    time."""
    if isinstance(event, StateChanged):
        why = f" ({event.reason})" if event.reason else ""
        log(f"{event.instance}: {event.old.value} -> {event.new.value}{why}")
    elif isinstance(event, OperationChanged):
        waiting = f", {event.waiting} waiting" if event.waiting else ""
        log(f"{event.instance}: operation {event.running or 'none'}{waiting}")
    elif isinstance(event, Notice):
        log(f"{event.level}: {event.text}")
