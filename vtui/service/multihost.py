"""`Fleet`, the dashboard's `SupervisorApi` (and `core.api.HostFeed`) over this machine's supervisor plus
the `vtui --host` links (`vtui.service.hosts.HostLink`): a remote instance is named `LABEL:NAME` (its
`InstanceStatus.host` is the label), or `LABEL:SESSION/NAME` when the host runs several sessions (the
first one found alone keeps its short names: a row never changes its name), its events and samples
are renamed on the way in, and requests on it are routed to its host. Requests without names
(autostart, "start all", quit's "stop all") go to this machine's session only: another machine's
instances are started or stopped by name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from vtui.core.api import LogScrollback, SupervisorApi, TelemetryFeed
from vtui.core.events import Event, subscribe_to
from vtui.core.model import FlagValue, InstanceSpec, Layout
from vtui.core.pending import FlagConflict
from vtui.core.state import State
from vtui.core.status import HostState, InstanceStatus
from vtui.service.hosts import HostLink
from vtui.service.remote import RemoteError
from vtui.service.sshforward import Forward

__all__ = ["Fleet", "HostGpu"]

SEP = ":"  # LABEL:NAME


def _chained(*unsubscribes: Callable[[], None] | None) -> Callable[[], None]:
    """One unsubscribe for a callback subscribed here and on this machine's supervisor."""

    def unsubscribe() -> None:
        for one in unsubscribes:
            if one is not None:
                one()

    return unsubscribe


@dataclasses.dataclass(frozen=True)
class HostGpu:
    """A GPU sample of another host (its supervisor's NVML sampler, or its simulated GPUs)."""

    host: str
    sample: Any  # telemetry.gpu.GpuSample, its processes' instances renamed LABEL:NAME


def qualify(fwd: Forward, name: str) -> str:
    """A remote instance's name in the fleet: LABEL:NAME, or LABEL:SESSION/NAME on a host of several."""
    if fwd.qualified:
        return f"{fwd.link.label}{SEP}{fwd.session}/{name}"
    return f"{fwd.link.label}{SEP}{name}"


class HostNames:
    """Which host and session a fleet name belongs to (`qualify` in reverse)."""

    def __init__(self, links: list[HostLink]) -> None:
        self.links = links

    def route(self, name: str) -> tuple[Forward, str] | None:
        """(the forward, the remote's own name) of a remote instance; None: this machine's."""
        for link in self.links:
            prefix = f"{link.label}{SEP}"
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            for fwd in link.forwards:
                if fwd.qualified and rest.startswith(f"{fwd.session}/"):
                    return fwd, rest[len(fwd.session) + 1 :]
            for fwd in link.forwards:  # an instance name has no "/": the short-named session's
                if not fwd.qualified and "/" not in rest:
                    return fwd, rest
            raise RemoteError(f"{name}: no such session on {link.label}")
        return None

    def split(
        self, names: Iterable[str] | None
    ) -> tuple[list[str] | None, dict[int, tuple[Forward, list[str]]]]:
        """`names` as (this machine's, {forward: its own names}); None: every instance, here only."""
        if names is None:
            return None, {}
        local: list[str] = []
        remote: dict[int, tuple[Forward, list[str]]] = {}
        for name in names:
            routed = self.route(name)
            if routed is None:
                local.append(name)
            else:
                fwd, own = routed
                remote.setdefault(id(fwd), (fwd, []))[1].append(own)
        return local, remote


def _relay_event(subscribers: list[Callable[[Event], None]], fwd: Forward, event: Event) -> None:
    """A remote supervisor's event, renamed into the fleet, to the fleet's subscribers."""
    instance = getattr(event, "instance", None)
    if instance:
        event = dataclasses.replace(event, instance=qualify(fwd, instance))
    for callback in list(subscribers):
        callback(event)


def _relay_sample(
    subscribers: list[Callable[[str, Any], None]], fwd: Forward, kind: str, sample: Any
) -> None:
    """A remote supervisor's telemetry to the fleet's subscribers; its GPU samples become `HostGpu`."""
    if kind in ("sample", "history"):  # already named LABEL:NAME (the client's sample_prefix)
        for callback in list(subscribers):
            callback(kind, sample)
    elif kind == "gpu":
        processes = tuple(
            dataclasses.replace(p, instance=qualify(fwd, p.instance)) if p.instance else p
            for p in sample.processes
        )
        gpu = HostGpu(fwd.link.label, dataclasses.replace(sample, processes=processes))
        for callback in list(subscribers):
            callback("host_gpu", gpu)


class Fleet:
    """This machine's session plus other hosts' sessions behind one `SupervisorApi` (and
    `TelemetryFeed`): what `vtui --host` hands the dashboard."""

    def __init__(self, local: SupervisorApi, links: Iterable[HostLink]) -> None:
        self.local = local
        self.links = list(links)
        labels = [link.label for link in self.links]
        for link in self.links:  # two targets with one label (user@a, other@a): the target tells
            if labels.count(link.label) > 1:
                link.relabel(link.target)
        self._subscribers: list[Callable[[Event], None]] = []
        self._sample_subscribers: list[Callable[[str, Any], None]] = []
        self._status_subscribers: list[Callable[[], None]] = []
        self._host_subscribers: list[Callable[[], None]] = []
        self._wired: set[int] = set()
        self._seen: dict[str, HostState] = {}
        self.names = HostNames(self.links)
        for link in self.links:
            link.listen(functools.partial(self._link_changed, link))

    # -- wiring the links' clients in --------------------------------------------------------------
    def _link_changed(self, link: HostLink) -> None:
        for fwd in link.forwards:
            if id(fwd) in self._wired:
                continue
            self._wired.add(id(fwd))
            fwd.client.sample_prefix = qualify(fwd, "")
            fwd.client.subscribe(functools.partial(_relay_event, self._subscribers, fwd))
            fwd.client.subscribe_telemetry(functools.partial(_relay_sample, self._sample_subscribers, fwd))
        state = link.state
        if self._seen.get(link.label) != state:
            self._seen[link.label] = state
            for callback in list(self._host_subscribers):
                callback()
        self._notify_statuses()  # a snapshot of the host's instances (or its link changed)

    def _notify_statuses(self) -> None:
        for callback in list(self._status_subscribers):
            callback()

    # -- the SupervisorApi -------------------------------------------------------------------------
    @property
    def layout(self) -> Layout:
        return self.local.layout

    @property
    def supervisor_pid(self) -> int | None:
        return getattr(self.local, "supervisor_pid", None)

    def hosts(self) -> tuple[HostState, ...]:
        return tuple(link.state for link in self.links)

    def subscribe_hosts(self, callback: Callable[[], None]) -> Callable[[], None]:
        return subscribe_to(self._host_subscribers, callback)

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        return _chained(subscribe_to(self._subscribers, callback), self.local.subscribe(callback))

    def subscribe_telemetry(self, callback: Callable[[str, Any], None]) -> Callable[[], None]:
        local = self.local.subscribe_telemetry(callback) if isinstance(self.local, TelemetryFeed) else None
        return _chained(subscribe_to(self._sample_subscribers, callback), local)

    def subscribe_statuses(self, callback: Callable[[], None]) -> Callable[[], None]:
        local = self.local.subscribe_statuses(callback) if isinstance(self.local, TelemetryFeed) else None
        return _chained(subscribe_to(self._status_subscribers, callback), local)

    def status(self) -> tuple[InstanceStatus, ...]:
        out = list(self.local.status())
        for link in self.links:
            for fwd in link.forwards:
                for st in fwd.client.status():  # its log file is on that host: no scrollback here
                    name = qualify(fwd, st.name)
                    out.append(dataclasses.replace(st, name=name, host=link.label, log_path=None))
        return tuple(out)

    def pids_of(self, name: str) -> set[int]:
        # another host's pids mean nothing here (this machine's GPU processes are attributed by pid)
        return set() if self.names.route(name) is not None else self.local.pids_of(name)

    def refresh_pids(self) -> None:
        refresh = getattr(self.local, "refresh_pids", None)
        if refresh is not None:
            refresh()

    def recent_lines(self, name: str) -> list[str]:
        routed = self.names.route(name)
        return self.local.recent_lines(name) if routed is None else routed[0].client.recent_lines(routed[1])

    async def older_lines(self, name: str, anchor: list[str], count: int) -> list[str] | None:
        """`core.api.LogScrollback`: another host's instance's log, read back from `anchor` by its own
        supervisor (`POST /logs` through the forward); this machine's by its own."""
        from vtui.service.client import ServiceClient, ServiceError, ServiceUnavailable

        routed = self.names.route(name)
        if routed is None:
            local = self.local
            return await local.older_lines(name, anchor, count) if isinstance(local, LogScrollback) else None
        fwd, own = routed
        client = ServiceClient(fwd.session, socket_file=fwd.local_socket)
        body = {"name": own, "n": count, "before": anchor}
        try:
            answer = await asyncio.to_thread(client.post, "/logs", body, timeout=30.0)
        except (ServiceError, ServiceUnavailable, OSError) as exc:
            raise OSError(f"{fwd.link.label}: {exc}") from exc
        lines = answer.get("lines")
        if not answer.get("found") or not isinstance(lines, list):
            return None
        return [str(line) for line in lines]

    @property
    def feeds_gpu(self) -> bool | None:
        """This machine's supervisor sends its GPU samples (the other hosts' always come as host_gpu)."""
        return getattr(self.local, "feeds_gpu", None)

    @property
    def facts(self) -> dict[str, Any]:
        facts = dict(getattr(self.local, "facts", {}) or {})
        for link in self.links:
            for fwd in link.forwards:
                facts.update({qualify(fwd, k): v for k, v in fwd.client.facts.items()})
        return facts

    async def adopt(self) -> list[str]:
        for link in self.links:  # in the background: a slow or dead host never holds the dashboard
            link.start()
        return await self.local.adopt()

    async def start(self, names: Iterable[str] | None = None) -> None:
        local, remote = self.names.split(names)
        if names is None or local:
            await self.local.start(local)
        for fwd, own in remote.values():
            await fwd.client.start(own)

    async def stop(self, names: Iterable[str] | None = None) -> None:
        local, remote = self.names.split(names)
        if names is None or local:
            await self.local.stop(local)
        for fwd, own in remote.values():
            await fwd.client.stop(own)

    async def restart(
        self, name: str, spec: InstanceSpec | None = None, *, label: str = "restart", fallback: bool = False
    ) -> Mapping[str, FlagValue] | None:
        routed = self.names.route(name)
        if routed is None:
            return await self.local.restart(name, spec, label=label, fallback=fallback)
        fwd, own = routed
        own_spec = dataclasses.replace(spec, name=own) if spec is not None else None
        return await fwd.client.restart(own, own_spec, label=label, fallback=fallback)

    def pending_edits(self) -> dict[str, Mapping[str, FlagValue]]:
        edits = dict(self.local.pending_edits())
        for link in self.links:
            for fwd in link.forwards:
                edits.update({qualify(fwd, k): v for k, v in fwd.client.pending_edits().items()})
        return edits

    def pending_conflicts(self) -> dict[str, Sequence[FlagConflict]]:
        conflicts = dict(self.local.pending_conflicts())
        for link in self.links:
            for fwd in link.forwards:
                conflicts.update({qualify(fwd, k): v for k, v in fwd.client.pending_conflicts().items()})
        return conflicts

    async def set_pending(
        self, name: str, flags: Mapping[str, FlagValue] | None, base: Mapping[str, FlagValue] | None = None
    ) -> None:
        routed = self.names.route(name)
        if routed is None:
            await self.local.set_pending(name, flags, base)
        else:
            await routed[0].client.set_pending(routed[1], flags, base)

    async def sleep(self, name: str, level: int = 1) -> None:
        routed = self.names.route(name)
        await (self.local.sleep(name, level) if routed is None else routed[0].client.sleep(routed[1], level))

    async def wake(self, name: str) -> None:
        routed = self.names.route(name)
        await (self.local.wake(name) if routed is None else routed[0].client.wake(routed[1]))

    async def wait_settled(
        self, names: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[str, State]:
        local, remote = self.names.split(names)
        settled: dict[str, State] = {}
        if names is None or local:
            settled.update(await self.local.wait_settled(local, timeout))
        for fwd, own in remote.values():
            done = await fwd.client.wait_settled(own, timeout)
            settled.update({qualify(fwd, k): v for k, v in done.items()})
        return settled

    async def run(self) -> None:
        for link in self.links:
            link.start()
        await self.local.run()

    def drop_links(self) -> None:
        """End every ssh at once, waiting for nothing (the dashboard is exiting)."""
        for link in self.links:
            link.drop()

    async def close(self, stop_instances: bool = False) -> None:
        for link in self.links:  # other hosts' instances are never stopped on quit
            await link.close()
        await self.local.close(stop_instances=stop_instances)
