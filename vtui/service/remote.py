"""`RemoteSupervisor`: the `SupervisorApi` of a session whose owner is its session supervisor process,
for the dashboard. Snapshots come from the supervisor's feed (`remote_feed.FeedFollower`: a status
snapshot is sent before each lifecycle event, so `status()` is current when a subscriber hears of the
event); requests are HTTP on the session's socket (`client`: h11 on the Unix socket, one connection
each, on the caller's event loop). When the supervisor goes away (kill -9), the feed is
re-opened on a new one, started on demand: it re-adopts the instances and the first message of its
feed replaces every snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from vtui.core.events import Event, subscribe_to
from vtui.core.model import FlagValue, InstanceSpec, Layout
from vtui.core.pending import FlagConflict
from vtui.core.runstate import MASK
from vtui.core.state import State
from vtui.service.client import RemoteError
from vtui.service.remote_feed import FeedFollower

__all__ = ["RemoteError", "RemoteSupervisor"]


class RemoteSupervisor(FeedFollower):
    """A client of one session's supervisor with the `Supervisor`'s face (`core.api.SupervisorApi`)."""

    @property
    def layout(self) -> Layout:
        return self._layout

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        return subscribe_to(self._subscribers, callback)

    def subscribe_telemetry(self, callback: Callable[[str, Any], None]) -> Callable[[], None]:
        """(kind, sample) for each metrics ("sample") and GPU ("gpu") sample of the feed, and
        ("history", a HistoryBackfill): one instance's recent history, backfilled for a newly attached
        client."""
        return subscribe_to(self._sample_subscribers, callback)

    def subscribe_statuses(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Called after each snapshot from the feed (also the first one of a new supervisor)."""
        return subscribe_to(self._status_subscribers, callback)

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

    async def older_lines(self, name: str, anchor: list[str], count: int) -> list[str] | None:
        """`core.api.LogScrollback`: the `count` lines of `name`'s log before `anchor`, read from its
        file by the supervisor (`POST /logs`; the dashboard reads no file of the state dir itself)."""
        try:
            answer = await self._request("/logs", {"name": name, "n": count, "before": anchor})
        except RemoteError as exc:
            raise OSError(str(exc)) from exc
        lines = answer.get("lines")
        if not answer.get("found") or not isinstance(lines, list):
            return None
        return [str(line) for line in lines]

    async def adopt(self) -> list[str]:
        """Attach to the session supervisor (started on demand): it adopts what runs. Raises its
        refusal of our layout file (the feed is open meanwhile: the first frame does not wait for it)."""
        await self._attach()
        if self._layout_sent is not None:
            await asyncio.wait({self._layout_sent})
            self._layout_sent.result()
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

    async def restart(
        self, name: str, spec: InstanceSpec | None = None, *, label: str = "restart", fallback: bool = False
    ) -> dict[str, FlagValue] | None:
        """`POST /restart` with the flags that differ from those it runs (set, unset), what the operation
        is called (`label`) and `fallback`. Raises PreflightError (nothing was stopped), RestartReverted
        (the new flags did not start: it runs the flags before again) or RemoteError."""
        body: dict[str, Any] = {"name": name}
        if label != "restart":
            body["label"] = label
        if fallback:
            body["fallback"] = True
        current = self._statuses.get(name)
        if spec is not None and current is not None:
            old, new = dict(current.spec.flags), dict(spec.flags)
            body["set"] = {k: v for k, v in new.items() if old.get(k) != v and v != MASK}
            body["unset"] = [k for k in old if k not in new]
        answer = await self._request("/restart", body)
        flags = answer.get("flags")
        return dict(flags) if isinstance(flags, dict) else None

    def pending_edits(self) -> dict[str, dict[str, FlagValue]]:
        return {name: dict(flags) for name, flags in self._edits.items()}

    def pending_conflicts(self) -> dict[str, tuple[FlagConflict, ...]]:
        return dict(self._conflicts)

    async def set_pending(
        self, name: str, flags: Mapping[str, FlagValue] | None, base: Mapping[str, FlagValue] | None = None
    ) -> None:
        body = {"name": name, "flags": dict(flags) if flags else None, "base": dict(base) if base else None}
        answer = await self._request("/pending", body)
        self._set_edits(name, answer.get("flags"), answer.get("conflicts"))  # now, not at the feed's message

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
        if stop_instances and self._attached is not None:
            with contextlib.suppress(RemoteError):
                await self.stop()
                _, answer = await self._http("GET", "/status")  # the last word, not a feed line unread
                self._apply_statuses(answer.get("instances") or [])
        self._closed = True
        if self._feed_task is not None:
            self._feed_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._feed_task
        if self._done is not None:
            self._done.set()

    def begin(self) -> None:
        """Follow the feed from now on without waiting for it to open (a host's link: the dashboard
        never waits on a network); `status()` is empty until the first hello."""
        if self._attached is None:
            self._attached = asyncio.Event()
            self._done = asyncio.Event()
            self._feed_task = asyncio.ensure_future(self._follow())
