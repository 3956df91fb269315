"""The supervisor's once-a-second work, made cheap: it runs for days next to the instances, so its
per-instance cost is what matters.

- `LeanLauncher`: the OS launcher whose health probe (`supervisor.health.HealthProbe`, launched
  instances and attached servers alike) GETs plain-http `/health` on the lean keep-alive HTTP/1.1
  client (`vtui.bench.lean_http`: ~0.1 ms of CPU per probe here, httpx ~1.7 ms), and a liveness check that
  reads `/proc/PID/stat` (kept open: one pread) for the start time the first full psutil check
  verified, and the state, instead of building a psutil.Process five times a second per instance
  (~0.17 ms each).
- `LeanFetch`: the same client as a `telemetry.scrape.Fetch`, which the one scrape loop
  (`telemetry.scrape.ScrapeLoop`) uses for plain-http URLs without a key; the payload is decoded only
  when its `vllm:` lines moved (`MetricsParser.parse_bytes`). With `keep_text` the last payload stays
  for the session's exporter (`service.exporter`: nothing is scraped twice).
Plain-http URLs only: the one health probe (`supervisor.health.HealthProbe`) takes httpx for the rest.
"""

from __future__ import annotations

import asyncio
import errno
import os
import select
import subprocess
from collections.abc import Callable, Hashable
from typing import Any

from vtui.bench.lean_http import ConnectTimeout, LeanHTTPError, LeanPool, ReadTimeout
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.launcher import OsLauncher
from vtui.telemetry.scrape import Answer, FetchFailed

__all__ = ["LeanFetch", "LeanLauncher"]


def _fields(data: bytes) -> tuple[str, str] | None:
    """(state, starttime) of a /proc/PID/stat text."""
    rest = data[data.rfind(b")") + 2 :].split()  # after the command name, which may hold spaces
    if len(rest) < 20:
        return None
    return rest[0].decode(), rest[19].decode()  # field 3 (state) and field 22 (starttime)


class _StatFiles:
    """/proc/PID/stat kept open per watched process: a look is one pread (~8 µs here; open, read and
    close of the file ~23 µs), five times a second per instance. An open one names that process, not
    its pid: once it is reaped, reads fail (ESRCH) even when the pid is taken again."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._fds: dict[tuple[int, float], int] = {}

    def fields(self, key: tuple[int, float]) -> tuple[str, str] | None:
        fd = self._fds.get(key)
        if fd is None:
            if len(self._fds) >= self.limit:
                self.close()
            try:
                fd = os.open(f"/proc/{key[0]}/stat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
            self._fds[key] = fd
        try:
            return _fields(os.pread(fd, 4096, 0))
        except OSError:
            self.forget(key)
            return None

    def forget(self, key: tuple[int, float]) -> None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for key in list(self._fds):
            self.forget(key)


class _Exits:
    """pidfds (Linux >= 5.3) of watched processes in one epoll set: whether any of them ended is one
    epoll_wait(0) for all of them (~1 µs; a pidfd turns readable when its process exits, zombie or
    reaped), not a /proc read per process (~10-30 µs here, five times a second per instance). A pidfd
    names its process, not its pid: a recycled pid is another process."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self.usable = hasattr(os, "pidfd_open")
        self._epoll: select.epoll | None = None
        self._fds: dict[Hashable, int] = {}
        self._keys: dict[int, Hashable] = {}
        self._ended: set[Hashable] = set()

    def watch(self, key: Hashable, pid: int) -> bool:
        """Watch `pid` under `key` (its identity is the caller's to check after this); False: cannot."""
        if not self.usable or len(self._fds) >= self.limit:
            return False
        try:
            fd = os.pidfd_open(pid)
        except OSError as exc:
            if exc.errno in (errno.ENOSYS, errno.EPERM):  # an old kernel, a sandbox: the /proc way
                self.usable = False
            return False
        if self._epoll is None:
            self._epoll = select.epoll()
        self._epoll.register(fd, select.EPOLLIN)
        self._fds[key], self._keys[fd] = fd, key
        return True

    def ended(self, key: Hashable) -> bool | None:
        """True: it ended; False: it runs; None: not watched."""
        if key in self._ended:
            return True
        if key not in self._fds:
            return None
        assert self._epoll is not None
        for fd, _ in self._epoll.poll(0):
            done = self._keys.get(fd)
            if done is not None:
                self.forget(done)
                if len(self._ended) >= self.limit:
                    self._ended.clear()
                self._ended.add(done)
        return key in self._ended

    def forget(self, key: Hashable) -> None:
        self._ended.discard(key)
        fd = self._fds.pop(key, None)
        if fd is not None:
            del self._keys[fd]
            assert self._epoll is not None
            self._epoll.unregister(fd)
            os.close(fd)

    def close(self) -> None:
        for key in list(self._fds):
            self.forget(key)
        self._ended.clear()
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None


class LeanFetch:
    """GETs of plain-http URLs (no API key to send) on the lean keep-alive client: `pool` gives the
    running event loop's (the launcher's, so probes and scrapes share its connections)."""

    def __init__(self, pool: Callable[[], LeanPool]) -> None:
        self.pool = pool

    def handles(self, url: str, api_key: str | None) -> bool:
        return not api_key and self.pool().handles(url, "GET")

    async def get(self, url: str, *, timeout: float, api_key: str | None = None) -> Answer:
        try:
            response = await self.pool().request("GET", url, deadline_s=timeout)
        except (LeanHTTPError, OSError) as exc:
            timed_out = isinstance(exc, (ConnectTimeout, ReadTimeout))
            raise FetchFailed(f"{type(exc).__name__} from {url}", timed_out=timed_out) from exc
        return Answer(response.status, response.body)

    async def aclose(self) -> None:
        return None  # the pool is its owner's to close


class LeanLauncher(OsLauncher):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._pool: LeanPool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._start_ticks: dict[tuple[int, float], str] = {}  # (pid, create time) -> /proc starttime
        self._stats = _StatFiles()
        self._exits = _Exits()
        self.health_probe.fast = LeanFetch(self.pool)  # /health on the lean client where it can

    def alive(self, handle: ProcessHandle) -> bool:
        key = (handle.pid, handle.create_time)
        if handle.popen is not None:
            self._reap_pump(handle.popen)
        ended = self._exits.ended(key)
        if ended is not None:
            return not ended
        if self._exits.watch(key, handle.pid):  # before the identity check: then it is that process's
            live = super().alive(handle)
            if not live:
                self._exits.forget(key)
            return live
        return self._alive_by_proc(handle, key)

    def _reap_pump(self, popen: subprocess.Popen[Any]) -> None:
        """Reap the pump (our child) once it ended, so it does not linger as a zombie: asked of its
        pidfd where there is one (a child's pid is not recycled before we reap it)."""
        key = ("pump", popen.pid)
        ended = self._exits.ended(key)
        if ended is False:
            return
        if ended is None and popen.returncode is None and self._exits.watch(key, popen.pid):
            return
        self._exits.forget(key)
        popen.poll()

    def _alive_by_proc(self, handle: ProcessHandle, key: tuple[int, float]) -> bool:
        """Without pidfds: the /proc/PID/stat look (start time and state) the first full check verified."""
        known = self._start_ticks.get(key)
        fields = self._stats.fields(key)
        if known is not None and fields is not None:
            live = fields[1] == known and fields[0] not in ("Z", "X")
        else:
            live = super().alive(handle)  # the full check (pid + create time), once
            if live and fields is not None:
                if len(self._start_ticks) > 4096:
                    self._start_ticks.clear()
                self._start_ticks[key] = fields[1]
        if not live:
            self._stats.forget(key)
        return live

    def pool(self) -> LeanPool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            self._pool = LeanPool(timeout_s=self.health_timeout, connect_timeout_s=self.health_timeout)
            self._pool_loop = loop
        return self._pool

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._pool_loop is asyncio.get_running_loop():
            await pool.aclose()
        self._pool_loop = None
        self._stats.close()
        self._exits.close()
        await super().aclose()
