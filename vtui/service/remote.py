"""`RemoteSupervisor`: the `SupervisorApi` of a session whose owner is its session supervisor process,
for the dashboard. Snapshots come from the supervisor's feed (a status snapshot is sent before each
lifecycle event, so `status()` is current when a subscriber hears of the event); requests are HTTP on
the session's socket (httpx over the Unix socket, on the caller's event loop). When the supervisor goes
away (kill -9), the feed is re-opened on a new one, started on demand: it re-adopts the instances and
the first message of its feed replaces every snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import h11
import httpx

from vtui.core.events import Event, LogLines
from vtui.core.model import FlagValue, InstanceSpec, Layout
from vtui.core.preflight import PreflightError
from vtui.core.runstate import MASK
from vtui.core.state import State
from vtui.core.supervision import InstanceStatus
from vtui.service import locations
from vtui.service.client import ensure_supervisor
from vtui.service.wire import decode_event, decode_facts, decode_gpu, decode_sample, decode_status

__all__ = ["RemoteSupervisor"]

HISTORY_BACKFILL = 600  # samples handed to a newly attached dashboard (its plots: 10 min at 1 Hz)
RECENT_LINES = 3000  # as many as the dashboard keeps of a run (startup facts need its first lines)


class RemoteError(RuntimeError):
    """The session supervisor refused a request (its message) or could not be reached."""


class RemoteSupervisor:
    """A client of one session's supervisor with the in-process `Supervisor`'s face."""

    def __init__(
        self,
        layout: Layout,
        *,
        reconnect_delay: float = 0.5,
        max_reconnect_delay: float | None = None,
        socket_file: Path | None = None,
        start_on_demand: bool = True,
        on_connection: Callable[[bool, str | None], None] | None = None,
        sample_prefix: str = "",
    ) -> None:
        """`socket_file`: another socket than this machine's session socket (a host's, forwarded by
        ssh: `vtui.service.hosts`); `start_on_demand=False`: never start a supervisor, only attach
        (and re-attach, waiting `reconnect_delay` doubled up to `max_reconnect_delay` between tries).
        `on_connection(connected, why)`: told when the feed opens (a hello) and when it is lost.
        `sample_prefix`: put before the instance name of each metrics sample handed to subscribers
        (another host's `gpu2:`; cheaper than renaming the decoded sample)."""
        self._layout = layout
        self.session = layout.session.name
        self.reconnect_delay = reconnect_delay
        self.max_reconnect_delay = max(reconnect_delay, max_reconnect_delay or reconnect_delay)
        self.socket_file = socket_file or locations.socket_path(self.session)
        self.start_on_demand = start_on_demand
        self.on_connection = on_connection
        self.sample_prefix = sample_prefix
        self.connected = False
        self._statuses: dict[str, InstanceStatus] = {}
        self._order: list[str] = layout.names()
        self._lines: dict[str, deque[str]] = {}
        self._pids: dict[str, set[int]] = {}
        self._sampled: set[str] = set()  # instances whose samples this client has (no backfill)
        self._subscribers: list[Callable[[Event], None]] = []
        self._sample_subscribers: list[Callable[[str, Any], None]] = []
        self._status_subscribers: list[Callable[[], None]] = []
        self.facts: dict[str, Any] = {}
        self._edits: dict[str, dict[str, FlagValue]] = {}  # pending flag edits (hello, "pending" messages)
        self.supervisor_pid: int | None = None
        self.feeds_gpu: bool | None = None  # the feed carries GPU samples (known at its hello)
        self._client: httpx.AsyncClient | None = None
        self._feed_task: asyncio.Task | None = None
        self._attached: asyncio.Event | None = None
        self._closed = False
        self._done: asyncio.Event | None = None

    # -- the SupervisorApi -----------------------------------------------------------------------
    @property
    def layout(self) -> Layout:
        return self._layout

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    def subscribe_telemetry(self, callback: Callable[[str, Any], None]) -> Callable[[], None]:
        """(kind, sample) for each metrics ("sample") and GPU ("gpu") sample of the feed, and
        ("samples", a tuple of one instance's MetricsSamples, oldest first): the history backfilled
        for a newly attached client."""
        self._sample_subscribers.append(callback)
        return lambda: self._sample_subscribers.remove(callback)

    def subscribe_statuses(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Called after each snapshot from the feed (also the first one of a new supervisor)."""
        self._status_subscribers.append(callback)
        return lambda: self._status_subscribers.remove(callback)

    def status(self) -> tuple[InstanceStatus, ...]:
        return tuple(self._statuses[n] for n in self._order if n in self._statuses)

    def pids_of(self, name: str) -> set[int]:
        """The instance's processes as last fetched by `refresh_pids` (else its leader)."""
        st = self._statuses.get(name)
        if st is None or not st.state.running:
            return set()
        return self._pids.get(name) or ({st.pid} if st.pid else set())

    def refresh_pids(self) -> None:
        """Fetch every instance's process tree from the supervisor. Blocking (a short local request):
        call it from a thread, as the GPU sampler does each second."""
        from vtui.service.client import ServiceClient, ServiceError, ServiceUnavailable

        try:
            answer = ServiceClient(self.session, socket_file=self.socket_file).get("/pids", timeout=5.0)
        except (ServiceError, ServiceUnavailable, OSError):
            return
        self._pids = {name: set(pids) for name, pids in (answer.get("pids") or {}).items()}

    def recent_lines(self, name: str) -> list[str]:
        return list(self._lines.get(name, ()))

    async def adopt(self) -> list[str]:
        """Attach to the session supervisor (started on demand): it adopts what runs."""
        await self._attach()
        return [st.name for st in self.status() if st.adopted and st.state.running]

    async def start(self, names: Iterable[str] | None = None) -> None:
        await self._request("/start", {"names": list(names) if names is not None else None})

    async def sleep(self, name: str, level: int = 1) -> None:
        """vLLM sleep mode through the session supervisor (raises its refusal as a ServiceError)."""
        await self._request("/sleep", {"name": name, "level": level})

    async def wake(self, name: str) -> None:
        await self._request("/wake", {"name": name})

    async def stop(self, names: Iterable[str] | None = None) -> None:
        await self._request("/stop", {"names": list(names) if names is not None else None})

    async def restart(self, name: str, spec: InstanceSpec | None = None) -> None:
        body: dict[str, Any] = {"name": name}
        current = self._statuses.get(name)
        if spec is not None and current is not None:
            old, new = dict(current.spec.flags), dict(spec.flags)
            body["set"] = {k: v for k, v in new.items() if old.get(k) != v and v != MASK}
            body["unset"] = [k for k in old if k not in new]
        await self._request("/restart", body)

    def pending_edits(self) -> dict[str, dict[str, FlagValue]]:
        return {name: dict(flags) for name, flags in self._edits.items()}

    async def set_pending(self, name: str, flags: Mapping[str, FlagValue] | None) -> None:
        answer = await self._request("/pending", {"name": name, "flags": dict(flags) if flags else None})
        self._set_edits(name, answer.get("flags"))  # now, not when the feed's message comes

    def _set_edits(self, name: str, flags: dict[str, FlagValue] | None) -> None:
        if flags:
            self._edits[name] = dict(flags)
        else:
            self._edits.pop(name, None)

    async def wait_settled(
        self, names: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[str, State]:
        answer = await self._request(
            "/wait", {"names": list(names) if names is not None else None, "timeout": timeout}
        )
        return {n: State(s) for n, s in answer["states"].items()}

    async def run(self) -> None:
        """Follow the supervisor until `close()`."""
        await self._attach()
        assert self._done is not None
        await self._done.wait()

    async def close(self, stop_instances: bool = False) -> None:
        if stop_instances and self._client is not None:
            with contextlib.suppress(RemoteError, httpx.HTTPError):
                await self.stop()
                response = await self._client.get("/status")  # the last word, not a feed line unread
                self._apply_statuses(response.json().get("instances") or [])
        self._closed = True
        if self._feed_task is not None:
            self._feed_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._feed_task
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._done is not None:
            self._done.set()

    def begin(self) -> None:
        """Follow the feed from now on without waiting for it to open (a host's link: the dashboard
        never waits on a network); `status()` is empty until the first hello."""
        if self._attached is None:
            self._attached = asyncio.Event()
            self._done = asyncio.Event()
            self._open_client()
            self._feed_task = asyncio.ensure_future(self._follow())

    # -- plumbing --------------------------------------------------------------------------------
    async def _attach(self) -> None:
        if self._attached is None:
            self._attached = asyncio.Event()
            self._done = asyncio.Event()
            await self._ensure()
            self._feed_task = asyncio.ensure_future(self._follow())
        await self._attached.wait()

    async def _ensure(self) -> None:
        if not self.start_on_demand:  # attach only: the feed's loop retries until it answers
            self._open_client()
            return
        if self._layout.path is None:
            raise RemoteError("a layout with no file cannot be handed to a session supervisor")
        _, started = await asyncio.to_thread(ensure_supervisor, self.session, self._layout.path)
        self._open_client()
        if not started:  # one already ran (maybe another layout file of this session): run ours
            await self._request("/layout", {"path": str(self._layout.path)})

    def _open_client(self) -> None:
        if self._client is None:
            transport = httpx.AsyncHTTPTransport(uds=str(self.socket_file))
            self._client = httpx.AsyncClient(transport=transport, base_url="http://vtui", timeout=None)

    def _connection(self, connected: bool, why: str | None = None) -> None:
        changed = connected != self.connected
        self.connected = connected
        if self.on_connection is not None and (changed or not connected):
            try:
                self.on_connection(connected, why)
            except Exception as exc:  # noqa: BLE001 — a broken consumer must not end the feed
                print(f"vtui: connection subscriber failed: {exc!r}", file=sys.stderr)

    async def _request(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._client is None:
            await self._attach()
        assert self._client is not None
        try:
            response = await self._client.post(path, json=body)
        except httpx.HTTPError as exc:
            raise RemoteError(f"session supervisor of {self.session}: {exc}") from exc
        answer = response.json() if response.content else {}
        if response.status_code == 409 and answer.get("error") == "preflight":
            raise PreflightError(answer.get("problems") or [])
        if response.status_code >= 400:
            raise RemoteError("; ".join(answer.get("problems") or [answer.get("error") or str(response)]))
        return answer

    async def _follow(self) -> None:
        """The feed, re-opened on a new supervisor when this one goes away."""
        assert self._attached is not None
        first = True
        delay = self.reconnect_delay
        while not self._closed:
            why = "the feed ended"
            try:
                if not first:
                    await self._ensure()
                first = False
                async for line in self._feed_lines():
                    message = json.loads(line)
                    hello = message.get("type") == "hello"
                    if hello:
                        self._apply_statuses(message.get("instances") or [])
                        await self._backfill_logs()
                        delay = self.reconnect_delay
                    self._on_message(message)
                    if hello:  # after the first snapshot: not in its way
                        if message.get("gpu"):
                            self._on_message({"type": "gpu", "sample": message["gpu"]})
                        await self._backfill_history()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 — gone, or not answering yet: try again shortly
                if self._closed:
                    return
                why = _reason(exc)
                if self.start_on_demand:  # this machine's supervisor: worth a line in the log
                    print(f"vtui: session supervisor feed: {exc!r}", file=sys.stderr)
            if self._closed:
                return
            self._connection(False, why)
            await asyncio.sleep(delay)
            delay = min(self.max_reconnect_delay, delay * 2)

    async def _feed_lines(self) -> AsyncIterator[bytes]:
        """The feed's NDJSON lines, read with h11 straight off the socket: this stream carries every
        sample and log line of every instance, and httpx's streaming layers cost the dashboard more
        than the parsing does (`benchmarks/bench_hosts.py`). Requests stay on httpx."""
        reader, writer = await asyncio.open_unix_connection(str(self.socket_file))
        conn = h11.Connection(h11.CLIENT)
        try:
            headers = [("host", "vtui"), ("accept", "application/x-ndjson")]
            writer.write(conn.send(h11.Request(method="GET", target="/feed", headers=headers)) or b"")
            writer.write(conn.send(h11.EndOfMessage()) or b"")
            await writer.drain()
            pending = b""
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await reader.read(1 << 16))  # b"": the supervisor went away
                elif isinstance(event, h11.Response):
                    if event.status_code != 200:
                        raise RemoteError(f"the feed answered HTTP {event.status_code}")
                elif isinstance(event, h11.Data):
                    pending += event.data
                    if b"\n" in pending:
                        *lines, pending = pending.split(b"\n")
                        for line in lines:
                            if line.strip():
                                yield line
                elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                    return
        finally:
            writer.close()

    async def _backfill_logs(self) -> None:
        """The log tail of each instance this client has no lines of yet (a dashboard opened on running
        instances; fetched side by side), handed to the subscribers as `LogLines` before the first
        snapshot: what it derives from a run's lines (startup facts, diagnosis) is there when it sees
        the instance READY."""
        assert self._client is not None
        client = self._client
        wanted = [st for st in self.status() if not self._lines.get(st.name) and st.log_path is not None]

        async def tail(name: str) -> tuple[str, ...]:
            try:
                response = await client.get("/logs", params={"name": name, "n": RECENT_LINES})
                return tuple(response.json().get("lines") or ()) if response.status_code == 200 else ()
            except (httpx.HTTPError, ValueError):
                return ()

        for st, lines in zip(wanted, await asyncio.gather(*(tail(st.name) for st in wanted)), strict=True):
            if lines:
                self._on_message(
                    {"type": "event", "event": {"kind": "lines", "instance": st.name, "lines": lines}}
                )

    async def _backfill_history(self) -> None:
        """The supervisor's recent metrics samples of each running instance this client has none of, so
        plots do not start empty: one ("samples", tuple) per instance, after the first snapshot."""
        assert self._client is not None
        for st in self.status():
            if not st.state.running or st.name in self._sampled:
                continue
            try:
                response = await self._client.get("/history", params={"name": st.name, "n": HISTORY_BACKFILL})
                samples = (response.json().get("samples") or []) if response.status_code == 200 else []
            except (httpx.HTTPError, ValueError):
                continue
            if not samples:
                continue
            self._sampled.add(st.name)
            batch = tuple(decode_sample(data) for data in samples)
            for telemetry in list(self._sample_subscribers):
                telemetry("samples", batch)

    def _on_message(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind in ("hello", "status"):
            self._apply_statuses(message.get("instances") or [])
            if kind == "hello":
                self._edits = {n: dict(f) for n, f in (message.get("pending") or {}).items() if f}
                self.supervisor_pid = message.get("supervisor_pid")
                self.feeds_gpu = bool(message.get("gpu_sampling"))
                assert self._attached is not None
                self._attached.set()
                self._connection(True)
            for notify in list(self._status_subscribers):
                notify()
        elif kind == "event":
            event = decode_event(message["event"])
            if isinstance(event, LogLines):
                self._lines.setdefault(event.instance, deque(maxlen=RECENT_LINES)).extend(event.lines)
            for callback in list(self._subscribers):
                try:
                    callback(event)
                except Exception as exc:  # noqa: BLE001 — a broken consumer must not end the feed
                    print(f"vtui: event subscriber failed: {exc!r}", file=sys.stderr)
        elif kind in ("sample", "gpu"):
            if kind == "sample":
                data = message["sample"]
                self._sampled.add(data.get("instance"))
                if self.sample_prefix and data.get("instance"):  # named as its subscribers know it
                    data["instance"] = self.sample_prefix + data["instance"]
            sample = decode_sample(message["sample"]) if kind == "sample" else decode_gpu(message["sample"])
            for telemetry in list(self._sample_subscribers):
                telemetry(kind, sample)
        elif kind == "facts":
            self.facts[message["instance"]] = decode_facts(message["facts"])
        elif kind == "pending":  # a dashboard's flag edits changed: what a snapshot's subscribers read
            self._set_edits(message["instance"], message.get("flags"))
            for notify in list(self._status_subscribers):
                notify()

    def _apply_statuses(self, instances: list[dict[str, Any]]) -> None:
        statuses = {}
        for data in instances:
            st = decode_status(data)
            statuses[st.name] = st
            if data.get("facts"):
                self.facts[st.name] = decode_facts(data["facts"])
            if st.name in self._layout.names():
                own = self._layout.instance(st.name)
                kept = {k: v for k, v in own.flags.items() if st.spec.flags.get(k) == MASK}
                spec = st.spec.with_flags(kept) if kept else st.spec
                self._layout = self._layout.replace_instance(spec)
                statuses[st.name] = _with_spec(st, spec)
        self._statuses = statuses
        self._order = [n for n in self._layout.names() if n in statuses] + [
            n for n in statuses if n not in self._layout.names()
        ]


def _reason(exc: BaseException) -> str:
    """A short why for the dashboard ("no supervisor answers", the exception's own words)."""
    if isinstance(
        exc, httpx.ConnectError | FileNotFoundError | ConnectionRefusedError | ConnectionResetError
    ):
        return "no supervisor answers on the socket"
    return str(exc) or type(exc).__name__


def _with_spec(st: InstanceStatus, spec: InstanceSpec) -> InstanceStatus:
    import dataclasses

    return dataclasses.replace(st, spec=spec)
