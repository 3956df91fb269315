"""One long-lived /metrics poller per instance: the next scrape is armed only after the previous one
finished (or timed out), so a hung server never gathers a pile of requests; an instance that keeps
failing is polled at the slower `down_interval`. Samples go out through a callback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from vtui.core.clock import Clock, SystemClock
from vtui.telemetry.metrics import MetricsSample, MetricsWindow
from vtui.telemetry.promtext import MetricsParser

__all__ = ["ScrapeLoop"]


class ScrapeLoop:
    """Scrapes `{base_url}/metrics` every `interval` seconds (counted from the start of the previous
    scrape), with a hard `timeout` on each; after `down_after` consecutive failures it waits
    `down_interval` between attempts until the instance answers again. `clock`: the time samples are
    stamped with and the pauses are counted on (tests pass a virtual one)."""

    def __init__(
        self,
        instance: str,
        base_url: str,
        on_sample: Callable[[MetricsSample], None],
        *,
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
        self._on_sample = on_sample
        self._on_error = on_error
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._transport = transport
        self._clock: Clock = clock or SystemClock()
        self.window = MetricsWindow(window_s)
        self.parser = MetricsParser()  # remembers the lines read: a scrape reads only what changed
        self.failures = 0  # consecutive
        self.last_error: str | None = None
        self.keep_text = False  # keep the last payload in `last_text` (the session's exporter reads it)
        self.last_text: str | None = None
        self.scrapes = 0  # attempts started: lets tests check nothing piles up
        self.in_flight = 0
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False

    @property
    def down(self) -> bool:
        return self.failures >= self.down_after

    def stop(self) -> None:
        """Ask run() to return; safe from any thread, and before run() started."""
        self._stopped = True
        if self._stop is None or self._loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._stop.set()
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stopped:
            return
        async with httpx.AsyncClient(
            timeout=self.timeout, headers=self._headers, transport=self._transport
        ) as client:
            while not self._stopped:
                started = self._clock.time()
                await self._scrape(client)
                took = self._clock.time() - started  # within [0, interval]: the wall clock may step
                pause = (
                    self.down_interval if self.down else self.interval - min(max(took, 0.0), self.interval)
                )
                if self._stopped:
                    break
                await self._pause(pause, self._stop)

    async def _pause(self, seconds: float, stop: asyncio.Event) -> None:
        """The clock's sleep of `seconds`, cut short by stop()."""
        sleeping = asyncio.ensure_future(self._clock.sleep(seconds))
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((sleeping, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeping.cancel()
            stopping.cancel()

    async def scrape_once(self) -> MetricsSample | None:
        """One scrape outside the loop (e.g. `vtui metrics URL`)."""
        async with httpx.AsyncClient(
            timeout=self.timeout, headers=self._headers, transport=self._transport
        ) as client:
            return await self._scrape(client)

    async def _scrape(self, client: httpx.AsyncClient) -> MetricsSample | None:
        self.scrapes += 1
        self.in_flight += 1
        try:
            # httpx's timeout is per phase; wait_for bounds the whole exchange (a slow trickle too).
            response = await asyncio.wait_for(client.get(self.url), self.timeout)
            if response.status_code != 200:
                self._failed(f"HTTP {response.status_code} from {self.url}")
                return None
            text = response.text
            self.last_text = text if self.keep_text else None
        except asyncio.TimeoutError:
            self._failed(f"no answer from {self.url} within {self.timeout:g} s")
            return None
        except httpx.HTTPError as exc:
            self._failed(f"{type(exc).__name__} from {self.url}: {exc}".rstrip(": "))
            return None
        finally:
            self.in_flight -= 1
        sample = self.window.update(self.parser.parse(text), self._clock.time(), self.instance)
        self.failures = 0
        self.last_error = None
        self._on_sample(sample)
        return sample

    def _failed(self, message: str) -> None:
        self.last_text = None
        self.failures += 1
        self.last_error = message
        if self._on_error is not None:
            self._on_error(message)
