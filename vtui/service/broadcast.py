"""The session service's events: kept (a bounded history), broadcast to the feeds' clients (status
first), told to `[session] on_event` / webhooks, and the startup facts and flag history each state
change leaves (persisted next to the run records, so a successor gets them back)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from vtui.core.atomic import atomic_write_text
from vtui.core.events import (
    Event,
    LogLines,
    OperationChanged,
    PhaseChanged,
    ProcessExited,
    StateChanged,
    gone,
)
from vtui.core.runstate import masked
from vtui.core.state import State
from vtui.service.history import HeldLines
from vtui.service.service_base import ServiceBase, log
from vtui.service.wire import encode_event, encode_facts, encode_status, feed_line
from vtui.supervisor import notify
from vtui.supervisor.attached import Attached
from vtui.supervisor.logfile import read_tail
from vtui.supervisor.replicas import describe

FLAG_HISTORY = 50
# Telemetry (metrics and GPU samples, log lines) goes to the feeds' clients together, at most this often:
# a dashboard wakes for it a few times a second, not once per sample and per line of each instance (it
# draws them at 1 Hz). Anything else (status, lifecycle events, facts) goes at once, after what is held.
FEED_BATCH_S = 0.25
_HELD_KINDS = frozenset({"sample", "gpu"})


class BroadcastMixin(ServiceBase):
    _held: list[bytes] | None = None  # telemetry lines waiting for the next flush (None: none armed)
    _held_lines: dict[str, HeldLines] | None = None  # log lines by instance, sent as one event each
    _held_timer: asyncio.TimerHandle | None = None

    def _load_state(self) -> None:
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        self.facts = {k: v for k, v in (data.get("facts") or {}).items() if isinstance(v, dict)}
        self.flag_history = {k: list(v) for k, v in (data.get("flag_history") or {}).items()}
        self.attached_up = {n for n in data.get("attached_up") or () if isinstance(n, str)}
        for problem in self.supervisor.edits.load(data.get("pending")):  # dashboards' unapplied edits
            log(f"{self.state_file}: {problem} (left out)")

    def _save_state(self) -> None:
        data = {
            "facts": self.facts,
            "flag_history": self.flag_history,
            "attached_up": sorted(self.attached_up),
            "pending": self.supervisor.edits.state(),  # with the flags each was made from
        }
        self._spawn(asyncio.to_thread(atomic_write_text, self.state_file, json.dumps(data), 0o600))

    def _edits_changed(self, name: str) -> None:
        """A kept flag edit changed (a client's `/pending`, or its rebase onto flags applied since):
        persisted, and sent to every feed."""
        self._save_state()
        edits = self.supervisor.edits
        self._broadcast(
            {
                "type": "pending",
                "instance": name,
                "flags": edits.get(name),
                "conflicts": [c.to_dict() for c in edits.conflicts(name)],
            }
        )

    # -- events ------------------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        encoded = encode_event(event)
        self.events.append(encoded)  # a log batch: its last lines only (`history.EventHistory`)
        if isinstance(event, LogLines):
            if self._feeds:  # nobody listening: nothing held (a client attaching later reads /logs)
                self._hold_lines(event.instance, event.lines)
            return
        if isinstance(event, (StateChanged, PhaseChanged, ProcessExited, OperationChanged)) or gone(
            event, self.supervisor.instances
        ):
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
            self._broadcast_line(feed_line(message), held=message.get("type") in _HELD_KINDS)

    def _broadcast_line(self, line: bytes, held: bool = False) -> None:
        """One feed line (JSON and its newline) to every client. `held`: telemetry (a sample, a GPU
        sample), held up to FEED_BATCH_S and sent with the others in one write; anything else first
        sends what is held (the lines that led to a state change go before it)."""
        if held:
            self._arm_flush().append(line)
            return
        self._flush_held()
        self._send(line)

    def _hold_lines(self, instance: str, lines: tuple[str, ...]) -> None:
        self._arm_flush()
        assert self._held_lines is not None
        held = self._held_lines.get(instance)
        if held is None:
            held = self._held_lines[instance] = HeldLines()
        held.extend(lines)  # bounded in bytes: a flood keeps its most recent lines, counts the rest

    def _arm_flush(self) -> list[bytes]:
        if self._held is None:
            self._held, self._held_lines = [], {}
            self._held_timer = asyncio.get_running_loop().call_later(FEED_BATCH_S, self._flush_held)
        return self._held

    def _flush_held(self) -> None:
        """Send what is held as one write: each instance's log lines as one event, then the samples."""
        held, lines = self._held, self._held_lines
        if held is None:
            return
        self._held = self._held_lines = None
        if self._held_timer is not None:
            self._held_timer.cancel()  # flushed early (a status went out): the next batch arms its own
            self._held_timer = None
        out = [
            feed_line({"type": "event", "event": _lines_event(name, batch)})
            for name, batch in (lines or {}).items()
        ]
        if self._feeds and (out or held):
            self._send(b"".join([*out, *held]))

    def _send(self, data: bytes) -> None:
        for feed in list(self._feeds):
            feed.put(data)  # a slow reader's feed ends itself (feed.FEED_BUFFER)

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


def _lines_event(name: str, held: HeldLines) -> dict[str, Any]:
    """A feed batch of one instance's lines; `omitted`: how many older ones the batch's byte bound left
    out (they are in the log file)."""
    event: dict[str, Any] = {"instance": name, "lines": list(held.lines), "kind": "lines"}
    if held.omitted:
        event["omitted"] = held.omitted
    return event
