"""The session service's events: kept (a bounded history), broadcast to the feeds' clients (status
first), told to `[session] on_event` / webhooks, and the startup facts and flag history each state
change leaves (persisted next to the run records, so a successor gets them back)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from vtui.core import notify
from vtui.core.atomic import atomic_write_text
from vtui.core.attached import Attached
from vtui.core.events import Event, PhaseChanged, ProcessExited, StateChanged
from vtui.core.logfile import read_tail
from vtui.core.replicas import describe
from vtui.core.runstate import masked
from vtui.core.state import State
from vtui.service.service_base import ServiceBase
from vtui.service.wire import encode_event, encode_facts, encode_status

FLAG_HISTORY = 50


class BroadcastMixin(ServiceBase):
    def _load_state(self) -> None:
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        self.facts = {k: v for k, v in (data.get("facts") or {}).items() if isinstance(v, dict)}
        self.flag_history = {k: list(v) for k, v in (data.get("flag_history") or {}).items()}

    def _save_state(self) -> None:
        data = {"facts": self.facts, "flag_history": self.flag_history}
        self._spawn(asyncio.to_thread(atomic_write_text, self.state_file, json.dumps(data), 0o600))

    # -- events ------------------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        encoded = encode_event(event)
        self.events.append(encoded)
        if isinstance(event, (StateChanged, PhaseChanged, ProcessExited)):
            self._broadcast_status()  # first: a client hearing of the event already has the snapshot
        self._broadcast({"type": "event", "event": encoded})
        if isinstance(event, StateChanged):
            self._on_state(event)
            self._tell(event)

    def _tell(self, event: StateChanged) -> None:
        """The `[session] on_event` / webhook notification a state change makes, once per change."""
        name, new, old = event.instance, event.new, event.old
        kind: str | None = None
        details: dict[str, Any] = {"from": old.value, "to": new.value}
        inst = self.supervisor.instances.get(name)
        if new is State.CRASHED:
            kind = notify.CRASHED
            self._troubled.add(name)
        elif new in (State.UNHEALTHY, State.UNREACHABLE):
            self._troubled.add(name)
        elif new is State.FAILED:
            budget = inst.spec.restart.max_restarts if inst is not None else 0
            spent = old is State.CRASHED and inst is not None and budget > 0 and inst.attempt >= budget
            kind = notify.RESTART_BUDGET_EXHAUSTED if spent else notify.FAILED
            details["restarts"] = inst.restarts if inst is not None else None
        elif new is State.READY and old is State.WAKING:
            kind = notify.WOKE
        elif new is State.READY and name in self._troubled:
            self._troubled.discard(name)
            kind = notify.RECOVERED
            details["restarts"] = inst.restarts if inst is not None else None
        elif new is State.ASLEEP and old is State.READY:
            kind = notify.ASLEEP
            details["level"] = inst.sleep_level if inst is not None else None
        elif new is State.STOPPED:
            self._troubled.discard(name)
        if kind is None or self.notifier is None:
            return
        self.notifier.notify(
            notify.NotifyEvent(kind, name, self.session, event.reason or "", event.at, details)
        )

    def _on_state(self, event: StateChanged) -> None:
        inst = self.supervisor.instances.get(event.instance)
        if inst is None:
            return
        history = self.flag_history.setdefault(event.instance, [])
        if event.new is State.STARTING and event.reason != "adopted":
            history.append({"at": event.at, "flags": masked(inst.spec.flags), "outcome": None})
            del history[:-FLAG_HISTORY]
            self._save_state()
        elif event.new is State.READY and event.old is State.STARTING and event.reason != "adopted":
            # a launch came up: its run's lines hold the startup (a wake's or a recovery's do not)
            if history and history[-1]["outcome"] is None:
                history[-1]["outcome"] = "ready"
            self._remember_facts(event.instance, list(inst.run_lines))
        elif event.new in (State.CRASHED, State.FAILED) and history and history[-1]["outcome"] is None:
            history[-1]["outcome"] = event.new.value
            self._save_state()
        elif event.new is State.READY and event.instance not in self.facts and not isinstance(inst, Attached):
            self._spawn(self._facts_from_log(event.instance))  # adopted, nothing persisted
        self._sync_scrapers()

    def _remember_facts(self, name: str, lines: list[str]) -> None:
        from vtui.telemetry.startup_log import parse_startup

        self.facts[name] = encode_facts(parse_startup(lines))
        self._save_state()
        self._broadcast({"type": "facts", "instance": name, "facts": self.facts[name]})

    async def _facts_from_log(self, name: str) -> None:
        inst = self.supervisor.instances.get(name)
        if inst is None or inst.log_path is None:
            return
        lines = await asyncio.to_thread(read_tail, inst.log_path, 5000)
        self._remember_facts(name, lines)

    def _broadcast(self, message: dict[str, Any]) -> None:
        if self._feeds:
            self._broadcast_line((json.dumps(message, separators=(",", ":")) + "\n").encode())

    def _broadcast_line(self, line: bytes) -> None:
        """One feed line (JSON and its newline) to every client."""
        for feed in self._feeds:
            feed.put(line)  # a slow reader's feed ends itself (feed.FEED_BUFFER)

    def _broadcast_status(self) -> None:
        if self._feeds:
            self._broadcast({"type": "status", "instances": self._statuses()})

    def _statuses(self) -> list[dict[str, Any]]:
        return [
            encode_status(
                st,
                in_layout=st.name in self._file_names,
                facts=self.facts.get(st.name),
                **describe(st.spec, self.supervisor.routers),
            )
            for st in self.supervisor.status()
        ]
