"""The instances one supervisor runs and the layout they come from (as `supervisor.replicas.supervised`
expands it), with the launches not yet spawned: which names a command means, which instances are
running or about to run, the spec each runs with, and which processes are theirs (`owners.ProcessOwners`
asks `owner_sessions` and `owner_pids`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from vtui.core.clock import Clock
from vtui.core.events import Event
from vtui.core.instance import Instance
from vtui.core.model import InstanceSpec, Layout
from vtui.core.pending import PendingEdits
from vtui.core.state import State
from vtui.supervisor.attached import Attached, is_attached
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.replicas import members
from vtui.supervisor.supervision import log_path_for

__all__ = ["Roster"]


class Roster:
    def __init__(
        self, layout: Layout, *, clock: Clock, emit: Callable[[Event], None], edits: PendingEdits
    ) -> None:
        self.session = layout.session.name
        self.layout = layout
        self.instances: dict[str, Instance[ProcessHandle]] = {}
        self.pending: dict[str, asyncio.Task[None]] = {}  # launches waiting for stagger / a GPU neighbour
        self.restored: dict[
            str, InstanceSpec
        ] = {}  # the layout's spec of an instance restored with other flags
        self._clock = clock
        self._emit = emit
        self._edits = edits

    def new_instance(self, spec: InstanceSpec) -> Instance[ProcessHandle]:
        kind = Attached if is_attached(spec) else Instance
        return kind(
            spec,
            clock=self._clock,
            emit=self._emit,
            session=self.session,
            log_path=log_path_for(self.session, spec.name),
        )

    def names(self, names: Iterable[str] | None) -> list[str]:
        """The instances `names` stand for, in layout order: a replica group's name is its replicas
        and its router; None: every instance. KeyError names the unknown ones."""
        if names is None:
            return self.layout.names()
        wanted = []
        for n in names:
            group = members(self.layout, n) if n not in self.instances else []
            wanted += group or [n]
        unknown = [n for n in wanted if n not in self.instances]
        if unknown:
            raise KeyError(f"no instance named {', '.join(unknown)} in session {self.session}")
        return [n for n in self.layout.names() if n in wanted]

    def active(self, name: str) -> bool:
        """Running, or about to launch."""
        return self.instances[name].state.running or name in self.pending

    def set_spec(self, spec: InstanceSpec) -> None:
        """The layout as it runs now names `spec` for its instance."""
        self.layout = self.layout.replace_instance(spec)

    def apply_spec(self, name: str, spec: InstanceSpec) -> None:
        """`name` starts next with `spec` (not the layout's, should it have been restored with others)."""
        inst = self.instances[name]
        self.restored.pop(name, None)
        inst.spec = spec
        self.set_spec(spec)
        self.rebase_edits(name)  # another client's kept edit keeps only its own changes on these

    def rebase_edits(self, name: str) -> None:
        """`name`'s applied flags may have changed (a restart with new flags, a new layout): a kept flag
        edit of it keeps only the user's own changes on them (`core.pending`)."""
        inst = self.instances.get(name)
        if inst is not None:
            self._edits.rebase(name, inst.spec.flags)

    def member_states(self) -> dict[str, tuple[InstanceSpec, State]]:
        # list(): the drain's stop_routing asks from the stop's thread
        return {n: (i.spec, i.state) for n, i in list(self.instances.items()) if i.spec.group is not None}

    def owner_sessions(self) -> dict[int, str]:
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

    def owner_pids(self) -> dict[int, str]:
        """Pids named otherwise: attached servers' local listeners, leaders recorded without a session."""
        out: dict[int, str] = {}
        for name, inst in self.instances.items():
            if isinstance(inst, Attached):
                if inst.state is not State.UNREACHABLE:
                    with contextlib.suppress(Exception):
                        out.update(dict.fromkeys(inst.local_pids(self._clock.time()), name))
            elif inst.handle is not None and inst.state.running and inst.handle.sid <= 0:
                out[inst.handle.pid] = name
        return out
