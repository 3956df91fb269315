"""The one /metrics poller (`ScrapeLoop`, one per instance) and the one way to GET a URL it and the
supervisor's /health probes share (`Fetch`).

A loop's next scrape is armed only after the previous one finished (or timed out), so a hung server
never gathers a pile of requests; an instance that keeps failing is polled at the slower
`down_interval`. The first scrape is at once; the later ones fall on the interval's grid, which every
loop of the event loop shares (`_Beat`), so the instances are scraped in one wake-up. Samples go out
through a callback.

How a request is made is the fetcher's: `HttpxFetch` (https, TLS verified, an API key as a bearer
token; `vtui metrics`), or the session supervisor's lean keep-alive client for plain http
(`service.probes.LeanFetch`, ~0.1 ms of CPU per request here, httpx ~1.7 ms).
"""

from __future__ import annotations

import asyncio
import math
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from vtui.core.clock import Clock, SystemClock
from vtui.telemetry.metrics import MetricsSample, MetricsWindow
from vtui.telemetry.promtext import MetricsParser

__all__ = ["Answer", "Fetch", "FetchFailed", "HttpxFetch", "ScrapeLoop"]


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: its status and body."""

    status: int
    body: bytes


class FetchFailed(Exception):
    """No HTTP answer. `str()`: why, naming the URL, as a scrape reports it; `timed_out`: none came
    within the timeout; the client's own error is the `__cause__`."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class Fetch(Protocol):
    """How a GET is made (a client kept per event loop): an `Answer`, or `FetchFailed`."""

    def handles(self, url: str, api_key: str | None) -> bool:
        """Whether this fetcher can GET `url` (with `api_key`, if one is set)."""
        ...

    async def get(self, url: str, *, timeout: float, api_key: str | None = None) -> Answer: ...

    async def aclose(self) -> None: ...


class HttpxFetch:
    """GETs with httpx: one client per event loop, kept (keep-alive; the CA bundle is loaded once).
    `verify` and `trust_env` as httpx's (TLS checked and the environment's proxies used, by default; a
    supervisor's own plain-http instances turn both off); an API key goes as a bearer token. The whole
    exchange is bounded by the timeout (httpx's is per phase: a slow trickle would outlive it)."""

    def __init__(
        self,
        *,
        verify: bool = True,
        trust_env: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
        max_keepalive: int | None = None,
    ) -> None:
        self.verify, self.trust_env, self.transport = verify, trust_env, transport
        self.max_keepalive = max_keepalive
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def handles(self, url: str, api_key: str | None) -> bool:
        return url.startswith(("http://", "https://"))

    def client(self, timeout: float) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            limits = httpx.Limits(max_keepalive_connections=self.max_keepalive)
            self._client = httpx.AsyncClient(
                timeout=timeout,
                verify=self.verify,
                trust_env=self.trust_env,
                transport=self.transport,
                limits=limits if self.max_keepalive is not None else httpx.Limits(),
            )
            self._loop = loop
        return self._client

    async def get(self, url: str, *, timeout: float, api_key: str | None = None) -> Answer:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            response = await asyncio.wait_for(self.client(timeout).get(url, headers=headers), timeout)
        except asyncio.TimeoutError as exc:
            raise FetchFailed(f"no answer from {url} within {timeout:g} s", timed_out=True) from exc
        except (httpx.HTTPError, OSError) as exc:
            raise FetchFailed(f"{type(exc).__name__} from {url}: {exc}".rstrip(": ")) from exc
        return Answer(response.status_code, response.content)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()
        self._loop = None


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


class ScrapeLoop:
    """Scrapes `{base_url}/metrics` every `interval` seconds on the shared grid, with a hard `timeout`
    on each; after `down_after` consecutive failures it waits `down_interval` between attempts until the
    instance answers again. `fetch`: how (httpx by default, with `api_key` and `transport`); `clock`: the
    time samples are stamped with and the grid is read on (tests pass a virtual one)."""

    def __init__(
        self,
        instance: str,
        base_url: str,
        on_sample: Callable[[MetricsSample], None],
        *,
        fetch: Fetch | None = None,
        interval: float = 1.0,
        timeout: float = 2.0,
        down_interval: float = 5.0,
        api_key: str | None = None,
        window_s: float = 60.0,
        down_after: int = 2,
        on_error: Callable[[str], None] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.instance = instance
        self.url = base_url.rstrip("/") + "/metrics"
        self.interval = interval
        self.timeout = timeout
        self.down_interval = down_interval
        self.down_after = down_after
        self.api_key = api_key
        self._on_sample = on_sample
        self._on_error = on_error
        self._owns_fetch = fetch is None
        self.fetch: Fetch = fetch if fetch is not None else HttpxFetch(transport=transport)
        self._clock: Clock = clock or _SYSTEM_CLOCK
        self.window = MetricsWindow(window_s)
        self.parser = MetricsParser()  # remembers the lines read: a scrape reads only what changed
        self.failures = 0  # consecutive
        self.last_error: str | None = None
        self.keep_text = False  # keep the last payload in `last_text` (the session's exporter reads it)
        self.last_text: str | None = None
        self.scrapes = 0  # attempts started: lets tests check nothing piles up
        self.in_flight = 0
        self._waiting: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False

    @property
    def down(self) -> bool:
        return self.failures >= self.down_after

    def stop(self) -> None:
        """Ask run() to return (cutting its wait short); safe from any thread, and before run() started."""
        self._stopped = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake()
        else:
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if self._waiting is not None and not self._waiting.done():
            self._waiting.cancel()  # a wait of the shared beat: the others' go on

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        beat = _beat(self.interval, self._clock)
        try:
            while not self._stopped:
                started = self._clock.time()
                try:
                    await self.scrape()
                except Exception as exc:  # noqa: BLE001 — a bug in a payload's handling must not end the loop
                    if self.last_error != (why := f"vtui could not read {self.url}: {exc!r}"):
                        print(f"{self.instance}: {why}", file=sys.stderr, flush=True)  # the supervisor's log
                    self.last_error = why
                if self._stopped:
                    break
                self._waiting = beat.wait(started, self.down_interval if self.down else self.interval)
                try:
                    await self._waiting
                except asyncio.CancelledError:
                    if not self._stopped:
                        raise  # the task was cancelled, not the wait by stop()
        finally:
            self._waiting = None
            if self._owns_fetch:
                await self.fetch.aclose()

    async def scrape_once(self) -> MetricsSample | None:
        """One scrape outside the loop (e.g. `vtui metrics URL`)."""
        try:
            return await self.scrape()
        finally:
            if self._owns_fetch:
                await self.fetch.aclose()

    async def scrape(self) -> MetricsSample | None:
        self.scrapes += 1
        self.in_flight += 1
        try:
            answer = await self.fetch.get(self.url, timeout=self.timeout, api_key=self.api_key)
        except FetchFailed as exc:
            self._failed(str(exc))
            return None
        finally:
            self.in_flight -= 1
        if answer.status != 200:
            self._failed(f"HTTP {answer.status} from {self.url}")
            return None
        self.last_text = answer.body.decode("utf-8", "replace") if self.keep_text else None
        sample = self.window.update(self.parser.parse_bytes(answer.body), self._clock.time(), self.instance)
        self.failures = 0
        self.last_error = None
        if not self._stopped:
            self._on_sample(sample)
        return sample

    def _failed(self, message: str) -> None:
        self.last_text = None
        self.failures += 1
        self.last_error = message
        if self._on_error is not None:
            self._on_error(message)
