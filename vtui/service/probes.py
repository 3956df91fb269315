"""The supervisor's once-a-second work, made cheap: it runs for days next to the instances, so its
per-instance cost is what matters.

- `LeanLauncher`: the OS launcher with `/health` probes on the lean keep-alive HTTP/1.1 client
  (`vtui.bench.lean_http`: ~0.1 ms of CPU per probe here, httpx ~1.7 ms), and a liveness check that
  reads `/proc/PID/stat` (kept open: one pread) for the start time the first full psutil check
  verified, and the state, instead of building a psutil.Process five times a second per instance
  (~0.17 ms each).
- `LeanScrapeLoop`: one `/metrics` poller per instance on the same client; parsing and windowing are
  telemetry's (`MetricsParser`, which reads only the lines that changed since the last scrape, and
  `MetricsWindow`), as in `telemetry.scrape.ScrapeLoop`; the payload is decoded only when its
  `vllm:` lines moved (`MetricsParser.parse_bytes`). With `keep_text`
  the last payload stays for the session's exporter (`service.exporter`: nothing is scraped twice).
- `LeanLauncher.probe`: an attached server's `/health` (plain http, no API key) on the same client.

Plain-http URLs only; anything else falls back to the OS launcher's httpx probe.
"""

from __future__ import annotations

import asyncio
import errno
import math
import os
import select
import subprocess
import sys
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from vtui.bench.lean_http import ConnectTimeout, LeanHTTPError, LeanPool, ReadTimeout
from vtui.core.clock import Clock, SystemClock
from vtui.core.model import InstanceSpec
from vtui.supervisor.attached import Probe, no_answer
from vtui.supervisor.launcher import OsLauncher, ProcessHandle
from vtui.telemetry.metrics import MetricsSample, MetricsWindow
from vtui.telemetry.promtext import MetricsParser

__all__ = ["LeanLauncher", "LeanScrapeLoop"]


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


class LeanLauncher(OsLauncher):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._pool: LeanPool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._start_ticks: dict[tuple[int, float], str] = {}  # (pid, create time) -> /proc starttime
        self._stats = _StatFiles()
        self._exits = _Exits()

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

    async def health(self, spec: InstanceSpec) -> bool:
        url = spec.health_url
        pool = self.pool()
        if not pool.handles(url, "GET"):
            return await super().health(spec)
        try:
            response = await pool.request("GET", url, deadline_s=self.health_timeout)
        except (LeanHTTPError, OSError):
            return False
        return response.status == 200

    async def probe(self, spec: InstanceSpec) -> Probe | None:
        """An attached server's /health on the lean client; None where it does not apply (https, an API
        key to send): the supervisor's httpx prober takes those."""
        url = f"{spec.base_url}/health"
        pool = self.pool()
        if spec.api_key or not pool.handles(url, "GET"):
            return None
        try:
            response = await pool.request("GET", url, deadline_s=self.health_timeout)
        except (ConnectTimeout, ReadTimeout):
            return Probe(None, f"no answer within {self.health_timeout:g} s")
        except (LeanHTTPError, OSError) as exc:
            return Probe(None, no_answer(exc))
        return Probe(response.status)

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._pool_loop is asyncio.get_running_loop():
            await pool.aclose()
        self._pool_loop = None
        self._stats.close()
        self._exits.close()
        await super().aclose()


class _Beat:
    """One timer for all the scrape loops of an event loop that share an interval: their scrapes fall
    on one grid (the clock's multiples of the interval, where the supervisor's health probes fall
    too), so the instances are scraped in one wake-up of the supervisor, their samples leave on the
    feed in one write, instead of a timer, a wake-up and a write each."""

    def __init__(self, clock: Clock, interval: float) -> None:
        self.clock, self.interval = clock, interval
        self._waiters: dict[int, list[asyncio.Future[None]]] = {}
        self._timers: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references

    def wait(self, started: float, period: float) -> asyncio.Future[None]:
        """Done at the grid tick nearest after `started` + `period` - interval/2 (a scrape that started
        a little after its tick is due at the next one, not the one after)."""
        k = math.ceil((started + period) / self.interval - 0.5)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.get(k)
        if waiters is None:
            waiters = self._waiters[k] = []
            # at most the period and half an interval away: a wall clock stepped back while the
            # scrape ran must not hold the scrapes for the length of the step
            delay = min(k * self.interval - self.clock.time(), period + self.interval / 2)
            timer = asyncio.ensure_future(self._fire_after(k, delay))
            self._timers.add(timer)
            timer.add_done_callback(self._timers.discard)
        waiters.append(future)
        return future

    async def _fire_after(self, k: int, delay: float) -> None:
        await self.clock.sleep(delay)
        for future in self._waiters.pop(k, ()):
            if not future.done():  # a stopped loop's wait was cancelled
                future.set_result(None)


_SYSTEM_CLOCK = SystemClock()
_BEATS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[float, Clock], _Beat]] = (
    weakref.WeakKeyDictionary()
)


def _beat(interval: float, clock: Clock) -> _Beat:
    beats = _BEATS.setdefault(asyncio.get_running_loop(), {})
    beat = beats.get((interval, clock))
    if beat is None:
        beat = beats[interval, clock] = _Beat(clock, interval)
    return beat


class LeanScrapeLoop:
    """Scrapes `{base_url}/metrics` every `interval` seconds (the next one is armed only after the
    previous one finished), `down_interval` after `down_after` failures in a row. The first scrape is at
    once; the later ones fall on the interval's grid, which every loop of the process shares (`_Beat`).
    `clock`: the time samples are stamped with and the grid is read on (tests pass a virtual one)."""

    def __init__(
        self,
        instance: str,
        base_url: str,
        on_sample: Callable[[MetricsSample], None],
        pool: Callable[[], LeanPool],
        *,
        interval: float = 1.0,
        timeout: float = 2.0,
        down_interval: float = 5.0,
        down_after: int = 2,
        window_s: float = 60.0,
        clock: Clock = _SYSTEM_CLOCK,
    ) -> None:
        self.instance = instance
        self.url = base_url.rstrip("/") + "/metrics"
        self.interval = interval
        self.timeout = timeout
        self.down_interval = down_interval
        self.down_after = down_after
        self.clock = clock
        self.window = MetricsWindow(window_s)
        self.parser = MetricsParser()  # remembers the lines read: a scrape reads only what changed
        self.failures = 0
        self.last_error: str | None = None
        self.keep_text = False  # keep the last payload in `last_text` (the session's exporter reads it)
        self.last_text: str | None = None
        self._on_sample = on_sample
        self._pool = pool
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    async def run(self) -> None:
        beat = _beat(self.interval, self.clock)
        while not self._stopped:
            started = self.clock.time()
            try:
                await self.scrape()
            except Exception as exc:  # noqa: BLE001 — a bug in a payload's handling must not end the loop
                if self.last_error != (why := f"vtui could not read {self.url}: {exc!r}"):
                    print(f"{self.instance}: {why}", file=sys.stderr, flush=True)  # the supervisor's log
                self.last_error = why
            down = self.failures >= self.down_after
            await beat.wait(started, self.down_interval if down else self.interval)

    async def scrape(self) -> MetricsSample | None:
        try:
            response = await self._pool().request("GET", self.url, deadline_s=self.timeout)
        except (LeanHTTPError, OSError) as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__} from {self.url}"
            self.last_text = None
            return None
        if response.status != 200:
            self.failures += 1
            self.last_error = f"HTTP {response.status} from {self.url}"
            self.last_text = None
            return None
        self.last_text = response.body.decode("utf-8", "replace") if self.keep_text else None
        sample = self.window.update(self.parser.parse_bytes(response.body), self.clock.time(), self.instance)
        self.failures = 0
        self.last_error = None
        if not self._stopped:
            self._on_sample(sample)
        return sample
