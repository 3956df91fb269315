"""Drives the instances of a layout: preflight, start order (one after another on a shared GPU),
log tailing, health checks, crash detection and the restart policy, adoption of instances a previous
vtui started, stop of whole process trees.

asyncio code with two long-lived loops (the tick: logs, exits, due restarts; the health probes), each
re-armed only after the previous round finished. Blocking OS work (stop, sweeps) goes through
`asyncio.to_thread`. Consumers get frozen events through `subscribe` and snapshots through `status`.

The class is put together from mixins, one module per concern: `supervisor_base` (shared state,
events, snapshots), `supervisor_adopt`, `supervisor_launch`, `supervisor_stop`, `supervisor_sleep`,
`supervisor_loops`. This module has construction, layout changes, replica expansion, waiting and close.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterable, Mapping

from vtui.core.clock import Clock, SystemClock
from vtui.core.gpu import GpuSources, instance_gpus
from vtui.core.model import FlagValue, InstanceSpec, Layout
from vtui.core.pending import FlagConflict, PendingEdits
from vtui.core.refusals import PreflightError
from vtui.core.runstate import RunStore, spec_from_dict
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.sim.gpuview import gpu_sources
from vtui.supervisor.attached import Attached, AttachedProber, is_attached
from vtui.supervisor.launcher import Launcher, OsLauncher
from vtui.supervisor.opqueue import Operation, Runner
from vtui.supervisor.owners import ProcessOwners
from vtui.supervisor.replicas import RouterHub, supervised
from vtui.supervisor.startgate import StartGate, Sweeper
from vtui.supervisor.supervision import SleepRefused, gpus_used, launch_spec, log_path_for
from vtui.supervisor.supervisor_adopt import AdoptMixin
from vtui.supervisor.supervisor_launch import LaunchMixin
from vtui.supervisor.supervisor_loops import LoopMixin
from vtui.supervisor.supervisor_sleep import SleepMixin
from vtui.supervisor.supervisor_stop import StopMixin

__all__ = [
    "InstanceStatus",
    "PreflightError",
    "SleepRefused",
    "Supervisor",
    "gpus_used",
    "launch_spec",
    "log_path_for",
]


class Supervisor(AdoptMixin, LaunchMixin, StopMixin, SleepMixin, LoopMixin):
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
        self.clock = clock or SystemClock()
        self.store = store or RunStore()
        self.health_interval = health_interval
        self.poll_interval = poll_interval
        self.stop_grace = stop_grace
        self.check_preflight = check_preflight
        self.adopt_unlisted = adopt_unlisted  # adopt recorded instances the layout no longer names
        self._subscribers = []
        self.instances = {}
        # the GPU source every GPU question asks (core.gpu.instance_gpus); tests set their own
        self.gpus = gpus if gpus is not None else gpu_sources(lambda: getattr(self, "_layout", layout))
        self.owners = ProcessOwners(self._owner_sessions, session=self.session, extra=self._owner_pids)
        self._layout = self._expand(layout)
        layout = self._layout
        # vllm-router membership of replica groups; the drain before a replica's stop asks it first
        self.routers = RouterHub(self._member_states, self._notice)
        if hasattr(self.launcher, "router") and getattr(self.launcher, "router", None) is None:
            self.launcher.router = self.routers  # type: ignore[attr-defined]
        self._reconciles = {}
        self._rescales: set[asyncio.Task] = set()  # replica groups being scaled (`set_layout`)
        self._reconcile_again = set()
        self._reconciled_at = 0.0
        for spec in layout.instances:
            self.instances[spec.name] = self._new_instance(spec)
        self._tailers = {}
        self._pending = {}  # launches waiting for stagger / a GPU neighbour
        self._gate = StartGate(lambda: len(self.gpus.machine.sample().gpus))  # who goes first on a shared GPU
        self._sweeper = Sweeper(self.launcher, self._notice, self._drain)  # orphan sweeps after a crash
        self._loops = []
        self._changed = None
        self._closed = None
        self._adopted_once = False
        self._restored_layout: dict[str, InstanceSpec] = {}
        self._policy_stops = {}  # liveness / stuck restarts under way
        self._sleeps = {}  # idle sleeps under way
        self._refusals = {}  # launches the GPU memory check refused, by instance
        self._ops = {}  # each instance's operation queue (supervisor.opqueue)
        self.prober = AttachedProber()  # attached servers' /health (the launcher's `probe` first, if any)
        self.edits = PendingEdits()  # dashboards' flag edits not yet applied (core.pending)

    def set_layout(self, layout: Layout) -> None:
        """Run `layout` from now on (same session): instances not running take its specs, new ones are
        added, running ones keep the spec they run with (until their next start), and one the layout
        no longer names stays while it runs (`stop` ends it). A running replica group whose `replicas`
        changed is scaled at once: new replicas start, dropped ones (the highest-numbered) leave the
        router, drain and stop (`_rescale`)."""
        if layout.session.name != self.session:
            raise ValueError(f"layout session {layout.session.name!r} is not {self.session!r}")
        layout = self._expand(layout)
        grown, shrunk = self._scaling(layout)
        for spec in layout.instances:
            self._restored_layout.pop(spec.name, None)  # the file's spec is given again
            inst = self.instances.get(spec.name)
            idle = inst is not None and not inst.state.running and spec.name not in self._pending
            other_kind = inst is not None and isinstance(inst, Attached) != is_attached(spec)
            if inst is None or (other_kind and (isinstance(inst, Attached) or idle)):
                self.instances[spec.name] = self._new_instance(spec)  # new, or it changed between kinds
            elif isinstance(inst, Attached) or idle:
                inst.spec = spec  # an attached server runs with no spec of vtui's: the new one at once
            self._rebase_edits(spec.name)
        kept = [
            self.instances[s.name].spec
            for s in self._layout.instances
            if s.name not in layout.names()
            and not isinstance(self.instances[s.name], Attached)  # nothing of it to stop: dropped
            and (self.instances[s.name].state.running or s.name in self._pending)
        ]
        for spec in self._layout.instances:
            if spec.name not in layout.names() and spec not in kept:
                self.instances.pop(spec.name, None)
        current = [self.instances[s.name].spec for s in layout.instances] + kept
        self._layout = dataclasses.replace(layout, instances=tuple(current))
        if grown or shrunk:
            self._rescale(grown, shrunk)

    # -- replica groups rescaled (`replicas = N` changed while the group runs) ------------------------
    def _scaling(self, layout: Layout) -> tuple[list[str], list[str]]:
        """The replicas `layout` (expanded) adds to and drops from replica groups that run now (a member
        running or about to launch): (to start, to stop). A group not running is just re-read."""
        running = {
            s.group
            for s in self._layout.instances
            if s.group and (self.instances[s.name].state.running or s.name in self._pending)
        }
        old, new = set(self._layout.names()), set(layout.names())
        for group in sorted(g for g in running if g in new):  # the entry is one plain instance now
            running.discard(group)
            self._notice(
                group,
                "warning",
                f"{group}: replicas = 1 makes it one plain instance with no router; the group runs on as "
                f"it is: stop it (`vtui down {group}`), then start it again",
            )
        running &= {s.group for s in layout.instances if s.group}  # an entry dropped: it runs on (`stop`)
        grown = [
            s.name
            for s in layout.instances
            if s.group in running and s.engine != "router" and s.name not in old
        ]
        shrunk = [
            s.name
            for s in reversed(self._layout.instances)  # the highest-numbered first
            if s.group in running and s.engine != "router" and s.name not in new
        ]
        return grown, shrunk

    def _rescale(self, grown: list[str], shrunk: list[str]) -> None:
        """Scale running replica groups to the layout: new replicas launch (their router adds each once
        READY, `/add_worker`); dropped ones, highest-numbered first, leave their router (`/remove_worker`,
        the drain's hook), drain, stop, and are forgotten."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop (a test's sync call): `start` launches the new ones
            return
        for name in shrunk:
            self._notice(name, "info", f"{name}: replicas lowered: leaves its router, drains and stops")
        for name in grown:
            self._notice(name, "info", f"{name}: replicas raised: starting (its router adds it once READY)")

        async def scale() -> None:
            if grown:
                await self.start(grown)
            for name in shrunk:
                if name in self.instances:
                    op = self._queue(name).submit("stop", self._scaled_away(name), label="scale down")
                    await asyncio.shield(op.future)

        task = asyncio.create_task(scale())
        self._rescales.add(task)
        task.add_done_callback(self._rescaled)

    def _rescaled(self, task: asyncio.Task) -> None:
        self._rescales.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._notice(None, "error", f"rescaling a replica group failed: {exc}")

    def _scaled_away(self, name: str) -> Runner:
        async def run(_op: Operation) -> None:  # one operation: nobody sees it stopped, not yet forgotten
            await self._stop_one(name)
            self._forget(name)

        return run

    def _forget(self, name: str) -> None:
        """A replica the layout no longer names, stopped: no longer supervised or listed."""
        inst = self.instances.get(name)
        if inst is None or inst.state.running or name in self._pending:
            return
        group = inst.spec.group
        del self.instances[name]
        self._layout = dataclasses.replace(
            self._layout, instances=tuple(s for s in self._layout.instances if s.name != name)
        )
        self.edits.set(name, None)
        if group is not None:
            self._reconcile_soon(group)
        # said once it is gone: a dashboard takes the snapshot without it (service.broadcast, ui.bridge)
        self._notice(name, "info", f"{name}: scaled away, no longer supervised")

    def _expand(self, layout: Layout) -> Layout:
        """`replicas = N` entries as the instances run (`supervisor.replicas.supervised`): the GPUs of a group
        that lists none are chosen by free memory; replicas already known keep theirs."""
        auto = [s for s in layout.instances if s.replicas > 1 and not s.gpus and not s.replica_gpus]
        if not any(s.replicas > 1 for s in layout.instances):
            return layout
        keep: dict[str, InstanceSpec] = {}
        if not getattr(self, "instances", None):  # a new supervisor: what the last one ran
            for record in self.store.all(self.session):
                with contextlib.suppress(Exception):
                    keep[record.name] = spec_from_dict(record.spec)
        keep.update({n: i.spec for n, i in getattr(self, "instances", {}).items()})
        free = self._free_memory(layout, auto[0]) if auto else None
        return supervised(layout, free_memory=free, keep=keep)

    def _free_memory(self, layout: Layout, spec: InstanceSpec) -> dict[int, int] | None:
        """GPU index -> free bytes on every GPU of the source `spec` runs on (core.gpu.instance_gpus);
        None when unknown (no GPUs: vllm-cpu replicas need none)."""
        try:
            view = instance_gpus(spec, self.gpus, every=True)
        except Exception:  # noqa: BLE001 — no GPUs known: the replicas stay unpinned
            return None
        return {i: free for i, free in view.free.items() if free is not None} or None

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

    # -- wait ------------------------------------------------------------------------------------
    async def wait_settled(
        self, names: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[str, State]:
        """Until each named instance is READY, FAILED, STOPPED or CRASHED with no restart coming."""
        wanted = self._names(names)
        self._ensure_loops()
        changed = self._changed
        assert changed is not None

        def settled(name: str) -> bool:  # one gone meanwhile (a replica scaled away) waits for nothing
            inst = self.instances.get(name)
            queue = self._ops.get(name)
            idle = queue is None or queue.idle
            return inst is None or (inst.settled and name not in self._pending and idle)

        async def settle() -> None:
            while not all(settled(n) for n in wanted):
                changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), 1.0)

        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(settle(), timeout)
        return {n: self.instances[n].state for n in wanted if n in self.instances}

    async def run(self) -> None:
        """Supervise (logs, health, restart policy) until `close()`."""
        self._ensure_loops()
        assert self._closed is not None
        await self._closed.wait()

    async def close(self, stop_instances: bool = False) -> None:
        """End supervision. By default instances keep running (a later vtui re-adopts them)."""
        if stop_instances:
            await self.stop()
        for queue in list(self._ops.values()):
            await queue.close()
        for task in [
            *self._rescales,
            *self._pending.values(),
            *self._loops,
            *self._sleeps.values(),
            *self._reconciles.values(),
        ]:
            task.cancel()
        others = [*self._sweeper.tasks.values(), *self._policy_stops.values(), *self._sleeps.values()]
        for task in [
            *self._rescales,
            *self._pending.values(),
            *self._loops,
            *others,
            *self._reconciles.values(),
        ]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._pending.clear()
        self._reconciles.clear()
        await self.routers.aclose()
        self._loops = []
        for tailer in self._tailers.values():
            tailer.close()
        self._tailers.clear()
        with contextlib.suppress(Exception):
            await self.prober.aclose()
        aclose = getattr(self.launcher, "aclose", None)  # the launcher's health client
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
        if self._closed is not None:
            self._closed.set()
