"""Several hosts, one dashboard: `vtui --host user@gpu2` attaches to the session supervisors of other
machines over SSH, with no new open port and no new credentials.

For each host, `HostLink` runs `ssh HOST vtui sessions --json` (the remote supervisors and their
sockets), then per remote session one OpenSSH forward of the remote Unix socket to a local one
(`ssh -N -o ExitOnForwardFailure=yes -L LOCAL.sock:REMOTE.sock HOST`, the local socket 0600 in the
0700 state dir), and a `RemoteSupervisor` on the local end: the same client, feed and requests as for
this machine's supervisor. A forward that dies (network, sshd, a suspended laptop) marks the host
disconnected and is started again with backoff (0.5 s doubling to 30 s); the feed re-attaches by
itself once the socket answers again. The host's sessions are looked for again and again (1 s doubling
to 60 s, from 1 s again after a new one): a session started there after the dashboard attached gets its
forward and its rows. Nothing here blocks the caller: every ssh runs as an asyncio subprocess, every
wait is on the event loop.

`Fleet` is the dashboard's `SupervisorApi` over this machine's supervisor plus the links: a remote
instance is named `LABEL:NAME` (its `InstanceStatus.host` is the label), or `LABEL:SESSION/NAME` when
the host runs several sessions (the first one found alone keeps its short names: a row never changes
its name), its events and samples are
renamed on the way in, and requests on it are routed to its host. Requests without names (autostart,
"start all", quit's "stop all") go to this machine's session only: another machine's instances are
started or stopped by name.

The ssh command is `$VTUI_SSH` (split like a shell line; default `ssh`) and the remote vtui is
`$VTUI_REMOTE_VTUI` (default `vtui`): tests run both on this machine through `vtui.testing.fake_ssh`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from vtui.core import paths
from vtui.core.api import SupervisorApi, TelemetryFeed
from vtui.core.events import Event
from vtui.core.model import FlagValue, InstanceSpec, Layout, SessionSpec
from vtui.core.pending import FlagConflict
from vtui.core.state import State
from vtui.core.supervision import HostState, InstanceStatus
from vtui.service.remote import RemoteError, RemoteSupervisor
from vtui.service.ssh import SSH_OPTIONS, host_label, remote_vtui, ssh_command

__all__ = ["Fleet", "HostGpu", "HostLink", "host_label", "remote_vtui", "ssh_command"]

DISCOVER_TIMEOUT = 20.0  # seconds for `ssh HOST vtui sessions --json`
FORWARD_TIMEOUT = 15.0  # seconds for a forward's local socket to answer
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 30.0
REDISCOVER_FIRST, REDISCOVER_MAX = 1.0, 60.0  # `vtui sessions --json` again: sessions started later
STABLE_S = 10.0  # a forward that lived this long was a good one: the backoff starts over
SEP = ":"  # LABEL:NAME


@dataclasses.dataclass(frozen=True)
class HostGpu:
    """A GPU sample of another host (its supervisor's NVML sampler, or its simulated GPUs)."""

    host: str
    sample: Any  # telemetry.gpu.GpuSample, its processes' instances renamed LABEL:NAME


def _find_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl  # looked up here, never in a forked child
    except (OSError, AttributeError):
        return None


_PRCTL = _find_prctl()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the dashboard dies, even by kill -9 (Linux's
    PR_SET_PDEATHSIG; elsewhere `drop_links` on the way out is all there is). Only a call through a
    function pointer resolved in the parent: nothing that could wait on a lock another thread held."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


async def _reaped(proc: asyncio.subprocess.Process, within: float = 2.0) -> None:
    """Read a killed child's pipes to their end and reap it, through the second cancellation a closing
    link sends (drop, then close): else its pipes' transports outlive the event loop. Bounded: a killed
    process ends at once."""
    end = time.monotonic() + within
    done = asyncio.ensure_future(proc.communicate())
    while not done.done() and time.monotonic() < end:
        try:
            await asyncio.wait_for(asyncio.shield(done), max(0.01, end - time.monotonic()))
        except asyncio.CancelledError:
            continue
        except Exception:  # noqa: BLE001 — a timeout, or pipes that cannot be read: give up
            break
    if not done.done():
        done.cancel()


class LinkError(Exception):
    """ssh failed: its last line of stderr, or what did not answer."""


class _Backoff:
    def __init__(self, first: float | None = None, cap: float | None = None) -> None:
        self.first = BACKOFF_FIRST if first is None else first
        self.cap = BACKOFF_MAX if cap is None else cap
        self.delay = self.first

    def reset(self) -> None:
        self.delay = self.first

    async def sleep(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.cap, self.delay * 2)


class _Forward:
    """One remote session reached through one ssh forward, and its supervisor client."""

    def __init__(self, link: HostLink, info: dict[str, Any], qualified: bool = False) -> None:
        self.link = link
        self.qualified = qualified  # its instances are LABEL:SESSION/NAME (chosen once: names stay)
        self.session = str(info["session"])
        self.remote_socket = str(info["socket"])
        digest = hashlib.sha256(f"{link.target}\0{self.remote_socket}".encode()).hexdigest()[:16]
        folder = paths.state_dir() / "hosts"
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        self.local_socket = folder / f"{digest}.sock"  # short: a Unix socket path has ~107 bytes
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Future[None] | None = None  # reads ssh's stderr to its end
        self.stderr: deque[str] = deque(maxlen=5)
        self.why: str | None = "connecting"
        self.client = RemoteSupervisor(
            Layout(SessionSpec(name=self.session), ()),
            socket_file=self.local_socket,
            start_on_demand=False,
            reconnect_delay=0.25,
            max_reconnect_delay=2.0,
            on_connection=self._on_connection,
        )

    @property
    def connected(self) -> bool:
        return self.client.connected and self.proc is not None and self.proc.returncode is None

    def _on_connection(self, connected: bool, why: str | None) -> None:
        if not connected and self.proc is not None and self.proc.returncode is None:
            self.why = why  # (when ssh is gone, what ssh said is the better why)
        self.link._changed()

    async def keep(self) -> None:
        """Keep the forward up until cancelled: start it, wait for it to die, start it again."""
        backoff = _Backoff()
        self.client.begin()
        while True:
            started = time.monotonic()
            try:
                await self._start()
                assert self.proc is not None
                await self.proc.wait()
                self.why = self._ssh_said(f"ssh exited ({self.proc.returncode})")
            except LinkError as exc:
                self.why = str(exc)
            await self._end()
            self.link._changed()
            if time.monotonic() - started >= STABLE_S:
                backoff.reset()
            await backoff.sleep()

    async def _start(self) -> None:
        self.local_socket.unlink(missing_ok=True)
        self.stderr.clear()
        self.proc = await asyncio.create_subprocess_exec(
            *ssh_command(),
            *SSH_OPTIONS,
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-o",
            "StreamLocalBindUnlink=yes",
            "-L",
            f"{self.local_socket}:{self.remote_socket}",
            self.link.target,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            preexec_fn=_die_with_parent,  # a killed dashboard leaves no `ssh -N` behind
        )
        self._reader = asyncio.ensure_future(self._read_stderr(self.proc))
        deadline = time.monotonic() + FORWARD_TIMEOUT
        while not self.local_socket.exists():
            if self.proc.returncode is not None:
                await self.proc.wait()
                raise LinkError(self._ssh_said(f"ssh exited ({self.proc.returncode})"))
            if time.monotonic() > deadline:
                raise LinkError(f"the forward of {self.session}'s socket did not come up")
            await asyncio.sleep(0.05)
        with contextlib.suppress(OSError):
            os.chmod(self.local_socket, 0o600)

    async def _read_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        with contextlib.suppress(Exception):
            async for raw in proc.stderr:
                line = raw.decode(errors="replace").strip()
                if line:
                    self.stderr.append(line)

    def _ssh_said(self, default: str) -> str:
        return self.stderr[-1] if self.stderr else default

    async def _end(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 3.0)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        reader, self._reader = self._reader, None
        if reader is not None:  # its stderr read to the end: the pipe closed before the loop is
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(reader), 1.0)
        self.local_socket.unlink(missing_ok=True)

    async def close(self) -> None:
        await self.client.close()
        await self._end()

    def drop(self) -> None:
        """End ssh now, without waiting (the app is going away)."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()


class HostLink:
    """One `--host` target: its sessions found over ssh, each one's socket forwarded and followed."""

    def __init__(self, target: str, *, label: str | None = None) -> None:
        self.target = target
        self.label = label or host_label(target)
        self.forwards: list[_Forward] = []
        self._state = HostState(self.label, target, "connecting", since=time.time())
        self._listeners: list[Callable[[], None]] = []
        self._task: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self._detail: str | None = None
        self._found = False

    @property
    def state(self) -> HostState:
        return self._state

    def listen(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        """Find the host's sessions, then look again with backoff (from the start again after a new
        one) for sessions started there since: each new one gets its forward. A failed look while
        forwards run changes nothing (each forward reports its own link)."""
        backoff = _Backoff()
        again = _Backoff(REDISCOVER_FIRST, REDISCOVER_MAX)
        while True:
            try:
                found = await self._discover()
            except LinkError as exc:
                if not self.forwards:
                    self._detail = str(exc)
                    self._changed()
                    await backoff.sleep()
                else:
                    await again.sleep()
                continue
            if not found and not self.forwards:
                self._found, self._detail = True, "no session supervisor runs there"
                self._changed()
                await backoff.sleep()
                continue
            self._found, self._detail = True, None
            if self._add(found):
                again.reset()
            await again.sleep()

    def _add(self, found: list[dict[str, Any]]) -> bool:
        """Forwards for the sessions not followed yet (by remote socket); True when there were any."""
        known = {fwd.remote_socket for fwd in self.forwards}
        new = [info for info in found if str(info["socket"]) not in known]
        if not new:
            return False
        qualified = bool(self.forwards) or len(found) > 1
        added = [_Forward(self, info, qualified) for info in new]
        self.forwards = [*self.forwards, *added]
        for fwd in added:
            fwd.client.subscribe_statuses(self._changed)
        self._changed()
        self._tasks += [asyncio.ensure_future(fwd.keep()) for fwd in added]
        return True

    async def _discover(self) -> list[dict[str, Any]]:
        """The remote supervisors (`vtui sessions --json` run over ssh)."""
        command = f"{remote_vtui()} sessions --json"
        try:
            proc = await asyncio.create_subprocess_exec(
                *ssh_command(),
                *SSH_OPTIONS,
                self.target,
                command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            raise LinkError(f"cannot run {ssh_command()[0]}: {exc.strerror or exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), DISCOVER_TIMEOUT)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise LinkError(f"`{command}` did not answer within {DISCOVER_TIMEOUT:g} s") from None
        except asyncio.CancelledError:  # the link closes while it looks: no ssh left behind
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await _reaped(proc)
            raise
        if proc.returncode != 0:
            lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
            raise LinkError(lines[-1] if lines else f"`{command}` exited {proc.returncode}")
        try:
            data = json.loads(out)
        except ValueError:
            raise LinkError(f"`{command}` printed no JSON (is vtui there? $VTUI_REMOTE_VTUI)") from None
        if not isinstance(data, list):
            raise LinkError(f"`{command}` printed no list")
        return [d for d in data if isinstance(d, dict) and d.get("session") and d.get("socket")]

    def _changed(self) -> None:
        if not self.forwards:
            state = "no session" if self._found and self._detail else "connecting"
            if not self._found and self._detail:
                state = "disconnected"
            new = HostState(self.label, self.target, state, self._detail, since=time.time())
        else:
            lost = [f for f in self.forwards if not f.connected]
            state = "connected" if not lost else "disconnected"
            detail = None if not lost else f"{lost[0].session}: {lost[0].why or 'connecting'}"
            sessions = tuple(f.session for f in self.forwards)
            new = HostState(self.label, self.target, state, detail, sessions, time.time())
        old = self._state
        if (old.state, old.detail, old.sessions) != (new.state, new.detail, new.sessions):
            self._state = new
        for listener in list(self._listeners):
            listener()

    async def close(self) -> None:
        for task in [*self._tasks, *([self._task] if self._task else [])]:
            task.cancel()
        for task in [*self._tasks, *([self._task] if self._task else [])]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for fwd in self.forwards:
            await fwd.close()

    def drop(self) -> None:
        for task in [*self._tasks, *([self._task] if self._task else [])]:
            task.cancel()
        for fwd in self.forwards:
            fwd.drop()


class Fleet:
    """This machine's session plus other hosts' sessions behind one `SupervisorApi` (and
    `TelemetryFeed`): what `vtui --host` hands the dashboard."""

    def __init__(self, local: SupervisorApi, links: Iterable[HostLink]) -> None:
        self.local = local
        self.links = list(links)
        labels = [link.label for link in self.links]
        for link in self.links:  # two targets with one label (user@a, other@a): the target tells
            if labels.count(link.label) > 1:
                link.label = link.target
                link._state = dataclasses.replace(link._state, label=link.label)
        self._subscribers: list[Callable[[Event], None]] = []
        self._sample_subscribers: list[Callable[[str, Any], None]] = []
        self._status_subscribers: list[Callable[[], None]] = []
        self._host_subscribers: list[Callable[[], None]] = []
        self._wired: set[int] = set()
        self._seen: dict[str, HostState] = {}
        for link in self.links:
            link.listen(functools.partial(self._link_changed, link))

    # -- names -------------------------------------------------------------------------------------
    def _qualify(self, fwd: _Forward, name: str) -> str:
        if fwd.qualified:
            return f"{fwd.link.label}{SEP}{fwd.session}/{name}"
        return f"{fwd.link.label}{SEP}{name}"

    def _route(self, name: str) -> tuple[_Forward, str] | None:
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

    def _split(
        self, names: Iterable[str] | None
    ) -> tuple[list[str] | None, dict[int, tuple[_Forward, list[str]]]]:
        if names is None:
            return None, {}
        local: list[str] = []
        remote: dict[int, tuple[_Forward, list[str]]] = {}
        for name in names:
            routed = self._route(name)
            if routed is None:
                local.append(name)
            else:
                fwd, own = routed
                remote.setdefault(id(fwd), (fwd, []))[1].append(own)
        return local, remote

    # -- wiring the links' clients in --------------------------------------------------------------
    def _link_changed(self, link: HostLink) -> None:
        for fwd in link.forwards:
            if id(fwd) in self._wired:
                continue
            self._wired.add(id(fwd))
            fwd.client.sample_prefix = self._qualify(fwd, "")
            fwd.client.subscribe(functools.partial(self._remote_event, fwd))
            fwd.client.subscribe_telemetry(functools.partial(self._remote_sample, fwd))
        state = link.state
        if self._seen.get(link.label) != state:
            self._seen[link.label] = state
            for callback in list(self._host_subscribers):
                callback()
        self._notify_statuses()  # a snapshot of the host's instances (or its link changed)

    def _remote_event(self, fwd: _Forward, event: Event) -> None:
        instance = getattr(event, "instance", None)
        if instance:
            event = dataclasses.replace(event, instance=self._qualify(fwd, instance))  # type: ignore[type-var]
        for callback in list(self._subscribers):
            callback(event)

    def _remote_sample(self, fwd: _Forward, kind: str, sample: Any) -> None:
        if kind == "sample":  # already named LABEL:NAME (the client's sample_prefix)
            for callback in list(self._sample_subscribers):
                callback("sample", sample)
        elif kind == "gpu":
            processes = tuple(
                dataclasses.replace(p, instance=self._qualify(fwd, p.instance)) if p.instance else p
                for p in sample.processes
            )
            gpu = HostGpu(fwd.link.label, dataclasses.replace(sample, processes=processes))
            for callback in list(self._sample_subscribers):
                callback("host_gpu", gpu)

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
        self._host_subscribers.append(callback)
        return lambda: self._host_subscribers.remove(callback)

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        self._subscribers.append(callback)
        local = self.local.subscribe(callback)

        def unsubscribe() -> None:
            local()
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    def subscribe_telemetry(self, callback: Callable[[str, Any], None]) -> Callable[[], None]:
        self._sample_subscribers.append(callback)
        local = (
            self.local.subscribe_telemetry(callback)
            if isinstance(self.local, TelemetryFeed)
            else lambda: None
        )

        def unsubscribe() -> None:
            local()
            with contextlib.suppress(ValueError):
                self._sample_subscribers.remove(callback)

        return unsubscribe

    def subscribe_statuses(self, callback: Callable[[], None]) -> Callable[[], None]:
        self._status_subscribers.append(callback)
        local = (
            self.local.subscribe_statuses(callback) if isinstance(self.local, TelemetryFeed) else lambda: None
        )

        def unsubscribe() -> None:
            local()
            with contextlib.suppress(ValueError):
                self._status_subscribers.remove(callback)

        return unsubscribe

    def status(self) -> tuple[InstanceStatus, ...]:
        out = list(self.local.status())
        for link in self.links:
            for fwd in link.forwards:
                for st in fwd.client.status():  # its log file is on that host: no scrollback here
                    name = self._qualify(fwd, st.name)
                    out.append(dataclasses.replace(st, name=name, host=link.label, log_path=None))
        return tuple(out)

    def pids_of(self, name: str) -> set[int]:
        # another host's pids mean nothing here (this machine's GPU processes are attributed by pid)
        return set() if self._route(name) is not None else self.local.pids_of(name)

    def refresh_pids(self) -> None:
        refresh = getattr(self.local, "refresh_pids", None)
        if refresh is not None:
            refresh()

    def recent_lines(self, name: str) -> list[str]:
        routed = self._route(name)
        return self.local.recent_lines(name) if routed is None else routed[0].client.recent_lines(routed[1])

    async def older_lines(self, name: str, anchor: list[str], count: int) -> list[str] | None:
        """`core.api.LogScrollback`: another host's instance's log, read back from `anchor` by its own
        supervisor (`POST /logs` through the forward); None for this machine's (read from its file)."""
        from vtui.service.client import ServiceClient, ServiceError, ServiceUnavailable

        routed = self._route(name)
        if routed is None:
            return None
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
                facts.update({self._qualify(fwd, k): v for k, v in fwd.client.facts.items()})
        return facts

    async def adopt(self) -> list[str]:
        for link in self.links:  # in the background: a slow or dead host never holds the dashboard
            link.start()
        return await self.local.adopt()

    async def start(self, names: Iterable[str] | None = None) -> None:
        local, remote = self._split(names)
        if names is None or local:
            await self.local.start(local)
        for fwd, own in remote.values():
            await fwd.client.start(own)

    async def stop(self, names: Iterable[str] | None = None) -> None:
        local, remote = self._split(names)
        if names is None or local:
            await self.local.stop(local)
        for fwd, own in remote.values():
            await fwd.client.stop(own)

    async def restart(self, name: str, spec: InstanceSpec | None = None) -> None:
        routed = self._route(name)
        if routed is None:
            await self.local.restart(name, spec)
            return
        fwd, own = routed
        await fwd.client.restart(own, dataclasses.replace(spec, name=own) if spec is not None else None)

    def pending_edits(self) -> dict[str, Mapping[str, FlagValue]]:
        edits = dict(self.local.pending_edits())
        for link in self.links:
            for fwd in link.forwards:
                edits.update({self._qualify(fwd, k): v for k, v in fwd.client.pending_edits().items()})
        return edits

    def pending_conflicts(self) -> dict[str, Sequence[FlagConflict]]:
        conflicts = dict(self.local.pending_conflicts())
        for link in self.links:
            for fwd in link.forwards:
                conflicts.update(
                    {self._qualify(fwd, k): v for k, v in fwd.client.pending_conflicts().items()}
                )
        return conflicts

    async def set_pending(
        self, name: str, flags: Mapping[str, FlagValue] | None, base: Mapping[str, FlagValue] | None = None
    ) -> None:
        routed = self._route(name)
        if routed is None:
            await self.local.set_pending(name, flags, base)
        else:
            await routed[0].client.set_pending(routed[1], flags, base)

    async def sleep(self, name: str, level: int = 1) -> None:
        routed = self._route(name)
        await (self.local.sleep(name, level) if routed is None else routed[0].client.sleep(routed[1], level))

    async def wake(self, name: str) -> None:
        routed = self._route(name)
        await (self.local.wake(name) if routed is None else routed[0].client.wake(routed[1]))

    async def wait_settled(
        self, names: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[str, State]:
        local, remote = self._split(names)
        settled: dict[str, State] = {}
        if names is None or local:
            settled.update(await self.local.wait_settled(local, timeout))
        for fwd, own in remote.values():
            done = await fwd.client.wait_settled(own, timeout)
            settled.update({self._qualify(fwd, k): v for k, v in done.items()})
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
