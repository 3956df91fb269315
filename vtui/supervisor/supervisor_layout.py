"""The layout a supervisor runs, changed while it runs (`set_layout`): new instances added, idle ones
given their new spec, running ones kept until their next start; `replicas = N` expanded
(`supervisor.replicas.supervised`, GPUs by free memory where a group lists none), and a running
replica group whose `replicas` changed scaled at once."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Iterable

from vtui.core.gpu import GpuSources, instance_gpus
from vtui.core.model import InstanceSpec, Layout
from vtui.core.pending import PendingEdits
from vtui.core.runstate import RunStore, spec_from_dict
from vtui.supervisor.attached import Attached, is_attached
from vtui.supervisor.membership import Membership
from vtui.supervisor.operations import Operations
from vtui.supervisor.opqueue import Operation, Runner
from vtui.supervisor.replicas import supervised
from vtui.supervisor.roster import Roster
from vtui.supervisor.supervisor_stop import Stops

__all__ = ["LayoutKeeper"]


class LayoutKeeper:
    def __init__(
        self,
        roster: Roster,
        operations: Operations,
        store: RunStore,
        edits: PendingEdits,
        membership: Membership,
        stops: Stops,
        notice: Callable[[str | None, str, str], None],
        *,
        gpus: GpuSources,
        start: Callable[[Iterable[str] | None], Awaitable[None]],
    ) -> None:
        self._roster = roster
        self._operations = operations
        self._store = store
        self._edits = edits
        self._membership = membership
        self._stops = stops
        self._notice = notice
        self._gpus = gpus  # the supervisor's GPU source: free memory for replica placement
        self._start = start  # the supervisor's own start (loops and adoption first)
        self.rescales: set[asyncio.Task[None]] = set()  # replica groups being scaled (`set_layout`)

    def set_layout(self, layout: Layout) -> None:
        """Run `layout` from now on (same session): instances not running take its specs, new ones are
        added, running ones keep the spec they run with (until their next start), and one the layout
        no longer names stays while it runs (`stop` ends it). A running replica group whose `replicas`
        changed is scaled at once: new replicas start, dropped ones (the highest-numbered) leave the
        router, drain and stop (`_rescale`)."""
        roster, instances = self._roster, self._roster.instances
        if layout.session.name != roster.session:
            raise ValueError(f"layout session {layout.session.name!r} is not {roster.session!r}")
        layout = self.expand(layout)
        grown, shrunk = self._scaling(layout)
        for spec in layout.instances:
            roster.restored.pop(spec.name, None)  # the file's spec is given again
            inst = instances.get(spec.name)
            idle = inst is not None and not inst.state.running and spec.name not in roster.pending
            other_kind = inst is not None and isinstance(inst, Attached) != is_attached(spec)
            if inst is None or (other_kind and (isinstance(inst, Attached) or idle)):
                instances[spec.name] = roster.new_instance(spec)  # new, or it changed between kinds
            elif isinstance(inst, Attached) or idle:
                inst.spec = spec  # an attached server runs with no spec of vtui's: the new one at once
            roster.rebase_edits(spec.name)
        kept = [
            instances[s.name].spec
            for s in roster.layout.instances
            if s.name not in layout.names()
            and not isinstance(instances[s.name], Attached)  # nothing of it to stop: dropped
            and (instances[s.name].state.running or s.name in roster.pending)
        ]
        for spec in roster.layout.instances:
            if spec.name not in layout.names() and spec not in kept:
                instances.pop(spec.name, None)
        current = [instances[s.name].spec for s in layout.instances] + kept
        roster.layout = dataclasses.replace(layout, instances=tuple(current))
        if grown or shrunk:
            self._rescale(grown, shrunk)

    # -- replica groups rescaled (`replicas = N` changed while the group runs) ------------------------
    def _scaling(self, layout: Layout) -> tuple[list[str], list[str]]:
        """The replicas `layout` (expanded) adds to and drops from replica groups that run now (a member
        running or about to launch): (to start, to stop). A group not running is just re-read."""
        roster, instances = self._roster, self._roster.instances
        running = {
            s.group
            for s in roster.layout.instances
            if s.group and (instances[s.name].state.running or s.name in roster.pending)
        }
        old, new = set(roster.layout.names()), set(layout.names())
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
            for s in reversed(roster.layout.instances)  # the highest-numbered first
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
                await self._start(grown)
            for name in shrunk:
                if name in self._roster.instances:
                    op = self._operations.queue(name).submit(
                        "stop", self._scaled_away(name), label="scale down"
                    )
                    await asyncio.shield(op.future)

        task = asyncio.create_task(scale())
        self.rescales.add(task)
        task.add_done_callback(self._rescaled)

    def _rescaled(self, task: asyncio.Task[None]) -> None:
        self.rescales.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._notice(None, "error", f"rescaling a replica group failed: {exc}")

    def _scaled_away(self, name: str) -> Runner:
        async def run(_op: Operation) -> None:  # one operation: nobody sees it stopped, not yet forgotten
            await self._stops.stop_one(name)
            self._forget(name)

        return run

    def _forget(self, name: str) -> None:
        """A replica the layout no longer names, stopped: no longer supervised or listed."""
        inst = self._roster.instances.get(name)
        if inst is None or inst.state.running or name in self._roster.pending:
            return
        group = inst.spec.group
        del self._roster.instances[name]
        self._roster.layout = dataclasses.replace(
            self._roster.layout, instances=tuple(s for s in self._roster.layout.instances if s.name != name)
        )
        self._edits.set(name, None)
        if group is not None:
            self._membership.soon(group)
        # said once it is gone: a dashboard takes the snapshot without it (service.broadcast, ui.bridge)
        self._notice(name, "info", f"{name}: scaled away, no longer supervised")

    def expand(self, layout: Layout) -> Layout:
        """`replicas = N` entries as the instances run (`supervisor.replicas.supervised`): the GPUs of a group
        that lists none are chosen by free memory; replicas already known keep theirs."""
        auto = [s for s in layout.instances if s.replicas > 1 and not s.gpus and not s.replica_gpus]
        if not any(s.replicas > 1 for s in layout.instances):
            return layout
        keep: dict[str, InstanceSpec] = {}
        if not self._roster.instances:  # a new supervisor: what the last one ran
            for record in self._store.all(self._roster.session):
                with contextlib.suppress(Exception):
                    keep[record.name] = spec_from_dict(record.spec)
        keep.update({n: i.spec for n, i in self._roster.instances.items()})
        free = self._free_memory(layout, auto[0]) if auto else None
        return supervised(layout, free_memory=free, keep=keep)

    def _free_memory(self, layout: Layout, spec: InstanceSpec) -> dict[int, int] | None:
        """GPU index -> free bytes on every GPU of the source `spec` runs on (core.gpu.instance_gpus);
        None when unknown (no GPUs: vllm-cpu replicas need none)."""
        try:
            view = instance_gpus(spec, self._gpus, every=True)
        except Exception:  # noqa: BLE001 — no GPUs known: the replicas stay unpinned
            return None
        return {i: free for i, free in view.free.items() if free is not None} or None
