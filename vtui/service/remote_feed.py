"""What `RemoteSupervisor` keeps of its session supervisor, and how: the feed is opened first (the
supervisor's hello is the first frame's data), on a supervisor started on demand or only attached to (a
host's forwarded socket), our layout handed over beside it; the snapshots, log lines, facts and pending
edits it sends are kept here (a status snapshot comes before each lifecycle event, so `status()` is
current when a subscriber hears of the event); the log tails and metrics history of instances the
client has none of are backfilled after the hello; when the supervisor goes away (kill -9) the feed is
re-opened on a new one, whose first message replaces every snapshot."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from vtui.core.events import Event, LogLines
from vtui.core.gpu import FedSource
from vtui.core.linering import LineRing
from vtui.core.model import FlagValue, InstanceSpec, Layout
from vtui.core.pending import FlagConflict, decode_conflicts
from vtui.core.refusals import PreflightError, RestartReverted
from vtui.core.runstate import MASK
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.service import locations
from vtui.service.client import (
    Connection,
    RemoteError,
    ensure_supervisor,
    feed_lines,
    open_feed,
    request,
    version_problem,
)
from vtui.service.wire import (
    decode_event,
    decode_facts,
    decode_gpu,
    decode_point,
    decode_sample,
    decode_status,
    loads,
)
from vtui.telemetry.metrics import HistoryBackfill

__all__ = ["FeedFollower"]

HISTORY_BACKFILL = 600  # samples handed to a newly attached dashboard (its plots: 10 min at 1 Hz)
HELLO_TIMEOUT_S = 30.0
REFUSED_RETRY_S = 5.0  # a supervisor of another API version: looked at again this often (a handover)  # a supervisor that takes the connection but sends no snapshot is not attached
RECENT_LINES = 3000  # as many as the dashboard keeps of a run (startup facts need its first lines)


class FeedFollower:
    """One session supervisor's feed followed, its state kept; requests to it (`RemoteSupervisor` is the
    `SupervisorApi` over this)."""

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
        host: str | None = None,
    ) -> None:
        """`socket_file`: another socket than this machine's session socket (a host's, forwarded by
        ssh: `vtui.service.sshforward`); `start_on_demand=False`: never start a supervisor, only attach
        (and re-attach, waiting `reconnect_delay` doubled up to `max_reconnect_delay` between tries).
        `on_connection(connected, why)`: told when the feed opens (a hello) and when it is lost.
        `sample_prefix`: put before the instance name of each metrics sample handed to subscribers
        (another host's `gpu2:`; cheaper than renaming the decoded sample). `host`: the ssh target the
        socket is forwarded from (named in what a supervisor of another vtui version is told)."""
        self._layout = layout
        self.session = layout.session.name
        self.reconnect_delay = reconnect_delay
        self.max_reconnect_delay = max(reconnect_delay, max_reconnect_delay or reconnect_delay)
        self.socket_file = socket_file or locations.socket_path(self.session)
        self.start_on_demand = start_on_demand
        self.on_connection = on_connection
        self.sample_prefix = sample_prefix
        self.host = host
        self.refusal: str | None = None  # the supervisor speaks another API version: the one line
        self._versions_said: set[int | None] = set()  # supervisor pids told of another vtui version
        self.hello_timeout = HELLO_TIMEOUT_S
        self.connected = False
        self._statuses: dict[str, InstanceStatus] = {}
        self._order: list[str] = layout.names()
        self._lines: dict[str, LineRing] = {}  # bounded in count and bytes
        self._pids: dict[str, set[int]] = {}
        self._sampled: set[str] = set()  # instances whose samples this client has (no backfill)
        self._subscribers: list[Callable[[Event], None]] = []
        self._sample_subscribers: list[Callable[[str, Any], None]] = []
        self._status_subscribers: list[Callable[[], None]] = []
        self.facts: dict[str, Any] = {}
        self._edits: dict[str, dict[str, FlagValue]] = {}  # pending flag edits (hello, "pending" messages)
        self._conflicts: dict[str, tuple[FlagConflict, ...]] = {}  # the flags of those another changed too
        self.supervisor_pid: int | None = None
        self.feeds_gpu: bool | None = None  # the feed carries GPU samples (known at its hello)
        # that supervisor's GPUs as a GPU source (core.gpu: another host's, for `instance_gpus`)
        self.gpus = FedSource("no GPU sample from the session supervisor yet")
        self._feed_task: asyncio.Task[None] | None = None
        self._attached: asyncio.Event | None = None
        self._layout_sent: asyncio.Future[dict[str, Any]] | None = None  # POST /layout, under way or done
        self._closed = False
        self._done: asyncio.Event | None = None

    def status(self) -> tuple[InstanceStatus, ...]:
        return tuple(self._statuses[n] for n in self._order if n in self._statuses)

    def _set_edits(self, name: str, flags: dict[str, FlagValue] | None, conflicts: Any = None) -> None:
        if flags:
            self._edits[name] = dict(flags)
        else:
            self._edits.pop(name, None)
        if flags and (found := decode_conflicts(conflicts)):
            self._conflicts[name] = found
        else:
            self._conflicts.pop(name, None)

    async def _attach(self) -> None:
        if self._attached is None:
            self._attached = asyncio.Event()
            self._done = asyncio.Event()
            if self.start_on_demand and self._layout.path is None:
                raise RemoteError("a layout with no file cannot be handed to a session supervisor")
            first = await self._connect() if self.start_on_demand else None  # its failure is the caller's
            self._feed_task = asyncio.ensure_future(self._follow(first))
            if self.start_on_demand:  # a hung supervisor is the caller's error too, not a wait forever
                try:
                    await asyncio.wait_for(self._attached.wait(), self.hello_timeout)
                except asyncio.TimeoutError:
                    raise RemoteError(
                        f"the session supervisor of {self.session} sent no snapshot within "
                        f"{self.hello_timeout:g} s (see `vtui ps`)"
                    ) from None
        await self._attached.wait()
        if self.refusal is not None:
            raise RemoteError(self.refusal)

    async def _connect(self) -> Connection:
        """The feed's connection. Straight to the running supervisor (its hello is the first frame's
        data: no liveness request first); one is started when none answers (`start_on_demand`). A
        supervisor this client did not start is handed our layout file alongside the feed, not before
        it (a new layout's snapshot follows on the feed); requests wait for that."""
        if not self.start_on_demand:
            return await open_feed(self.socket_file)
        started = False
        try:
            connection = await open_feed(self.socket_file)
        except (FileNotFoundError, ConnectionRefusedError):
            if self._layout.path is None:
                raise RemoteError("a layout with no file cannot be handed to a session supervisor") from None
            _, started = await asyncio.to_thread(ensure_supervisor, self.session, self._layout.path)
            connection = await open_feed(self.socket_file)
        if not started:  # one already ran (maybe another layout file of this session): run ours
            self._layout_sent = asyncio.ensure_future(
                self._request("/layout", {"path": str(self._layout.path)}, after_layout=False)
            )
            self._layout_sent.add_done_callback(_said)
        return connection

    def _connection(self, connected: bool, why: str | None = None) -> None:
        changed = connected != self.connected
        self.connected = connected
        if self.on_connection is not None and (changed or not connected):
            try:
                self.on_connection(connected, why)
            except Exception as exc:  # noqa: BLE001 — a broken consumer must not end the feed
                print(f"vtui: connection subscriber failed: {exc!r}", file=sys.stderr)

    async def _request(self, path: str, body: dict[str, Any], *, after_layout: bool = True) -> dict[str, Any]:
        if self._attached is None:
            await self._attach()
        if self.refusal is not None:  # nothing is asked of a supervisor of another API version
            raise RemoteError(self.refusal)
        if after_layout and self._layout_sent is not None and not self._layout_sent.done():
            await asyncio.wait({self._layout_sent})  # what we ask is asked of our layout
        status, answer = await self._http("POST", path, body)
        if status == 409 and answer.get("error") == "preflight":
            raise PreflightError(answer.get("problems") or [])
        if status == 409 and isinstance(answer.get("flags"), dict):  # a restart that went back
            raise RestartReverted(str(answer.get("error") or "the new flags did not start"), answer["flags"])
        if status >= 400:
            raise RemoteError("; ".join(answer.get("problems") or [answer.get("error") or f"HTTP {status}"]))
        return answer

    async def _http(
        self, method: str, target: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        return await request(
            self.socket_file, method, target, body, who=f"session supervisor of {self.session}"
        )

    async def _follow(self, connection: Connection | None = None) -> None:
        """The feed, re-opened on a new supervisor when this one goes away. `connection`: the first one,
        opened by `_attach`."""
        assert self._attached is not None
        delay = self.reconnect_delay
        while not self._closed:
            why = "the feed ended"
            try:
                if connection is None:
                    connection = await self._connect()
                lines, connection = feed_lines(connection), None
                async for line in lines:
                    message = loads(line)  # the feed's codec (wire: orjson)
                    if message.get("type") != "hello":
                        self._on_message(message)
                        continue
                    if self._refused(message):
                        why = str(self.refusal)
                        await lines.aclose()  # the connection is closed now, not when collected
                        break
                    delay = self.reconnect_delay
                    # the first frame draws from the hello: only the lines a first view derives
                    # something from (a failed run's diagnosis, facts the supervisor lacks) go before it
                    self._apply_statuses(message.get("instances") or [])
                    fetched = await self._backfill_logs(self._needs_lines())
                    self._on_message(message)
                    if message.get("gpu"):
                        self._on_message({"type": "gpu", "sample": message["gpu"]})
                    await self._backfill_logs(skip=fetched)  # the log views' tails; the feed waits
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
            await asyncio.sleep(max(delay, REFUSED_RETRY_S) if self.refusal is not None else delay)
            delay = min(self.max_reconnect_delay, delay * 2)

    def _refused(self, hello: dict[str, Any]) -> bool:
        """Whether this supervisor speaks another API version (`refusal`: the line; the first attach
        raises it, requests are refused with it). Another vtui version of the same API is said once per
        supervisor, as a warning notice."""
        api = hello.get("api_version")
        line, refused = version_problem(
            self.session, api if isinstance(api, int) else 0, hello.get("vtui_version"), self.host
        )
        self.refusal = line if refused else None
        if refused:
            assert self._attached is not None
            self._attached.set()  # the first attach's wait ends: with the refusal
            return True
        pid = hello.get("supervisor_pid")
        if line is not None and pid not in self._versions_said:
            self._versions_said.add(pid)
            notice = {
                "kind": "notice",
                "instance": None,
                "level": "warning",
                "text": line.removeprefix("vtui: "),
            }
            self._on_message({"type": "event", "event": notice})
        return False

    def _needs_lines(self) -> list[str]:
        """Instances whose first view is derived from their run's lines: a failed run (its diagnosis)
        and a READY one whose startup facts the supervisor has not read."""
        return [
            st.name
            for st in self.status()
            if st.state in (State.CRASHED, State.FAILED)
            or (st.state is State.READY and st.name not in self.facts)
        ]

    async def _backfill_logs(self, names: list[str] | None = None, skip: Collection[str] = ()) -> set[str]:
        """The log tail of each instance (of `names`, else all but `skip`) this client has no lines of yet
        (a dashboard opened on running instances; fetched side by side), handed to the subscribers as
        `LogLines`. Returns the names asked for."""
        wanted = [
            st
            for st in self.status()
            if (names is None or st.name in names)
            and st.name not in skip
            and not self._lines.get(st.name)
            and st.log_path is not None
        ]

        async def tail(name: str) -> tuple[str, ...]:
            try:
                status, answer = await self._http(
                    "GET", "/logs?" + urlencode({"name": name, "n": RECENT_LINES})
                )
            except RemoteError:
                return ()
            return tuple(answer.get("lines") or ()) if status == 200 else ()

        for st, lines in zip(wanted, await asyncio.gather(*(tail(st.name) for st in wanted)), strict=True):
            if lines:
                self._on_message(
                    {"type": "event", "event": {"kind": "lines", "instance": st.name, "lines": lines}}
                )
        return {st.name for st in wanted}

    async def _backfill_history(self) -> None:
        """The supervisor's recent metrics of each running instance this client has none of, so plots do
        not start empty: one ("history", HistoryBackfill) per instance as its answer comes, after the
        first snapshot (fetched side by side; the feed waits, so they come before its next live sample).
        Asked as points (a plot's figures: a tenth of a whole sample's bytes) and the newest sample
        whole; a supervisor that sends whole samples is read the same way. 32 instances' 600 whole
        samples, decoded and held until the last answer, were a dashboard's peak memory (~55 MB) and
        1.7 s of its loop (`benchmarks/bench_sample_memory.py`)."""
        wanted = [st.name for st in self.status() if st.state.running and st.name not in self._sampled]

        async def history(name: str) -> None:
            target = "/history?" + urlencode({"name": name, "n": HISTORY_BACKFILL, "fields": "points"})
            try:
                status, answer = await self._http("GET", target)
            except RemoteError:
                return
            samples, latest = answer.get("samples") or [], answer.get("latest")
            if latest is None and samples:  # an older supervisor: whole samples
                latest = samples.pop()
            if status != 200 or not isinstance(latest, dict) or name in self._sampled:
                return
            self._sampled.add(name)
            qualified = self.sample_prefix + name
            latest["instance"] = qualified
            backfill = HistoryBackfill(
                qualified, tuple(decode_point(data) for data in samples), decode_sample(latest)
            )
            for telemetry in list(self._sample_subscribers):
                telemetry("history", backfill)

        await asyncio.gather(*(history(n) for n in wanted))

    def _on_message(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind in ("hello", "status"):
            self._apply_statuses(message.get("instances") or [])
            if kind == "hello":
                self._edits = {n: dict(f) for n, f in (message.get("pending") or {}).items() if f}
                conflicts = (message.get("pending_conflicts") or {}).items()
                self._conflicts = {
                    n: c for n, data in conflicts if n in self._edits and (c := decode_conflicts(data))
                }
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
                self._lines.setdefault(event.instance, LineRing(RECENT_LINES)).extend(event.lines)
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
            sample: Any
            if kind == "sample":
                sample = decode_sample(message["sample"])
            else:
                sample = decode_gpu(message["sample"])
                self.gpus.update(sample)
            for telemetry in list(self._sample_subscribers):
                telemetry(kind, sample)
        elif kind == "facts":
            self.facts[message["instance"]] = decode_facts(message["facts"])
        elif kind == "pending":  # a dashboard's flag edits changed: what a snapshot's subscribers read
            self._set_edits(message["instance"], message.get("flags"), message.get("conflicts"))
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


def _said(task: asyncio.Future[dict[str, Any]]) -> None:
    """A layout the supervisor refused after a re-attach (the first attach's caller hears it itself)."""
    if not task.cancelled() and task.exception() is not None:
        print(f"vtui: session supervisor refused the layout: {task.exception()}", file=sys.stderr)


def _reason(exc: BaseException) -> str:
    """A short why for the dashboard ("no supervisor answers", the exception's own words)."""
    if isinstance(exc, FileNotFoundError | ConnectionRefusedError | ConnectionResetError):
        return "no supervisor answers on the socket"
    return str(exc) or type(exc).__name__


def _with_spec(st: InstanceStatus, spec: InstanceSpec) -> InstanceStatus:
    return dataclasses.replace(st, spec=spec)
