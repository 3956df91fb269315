"""What the server said during a step: /metrics scraped alongside the load (KV usage, waiting and
running peaks, preemptions, the server-side TTFT histogram), so each step's client figures sit next to
the engine's own. Parsing is vtui.telemetry's; this module only keeps a step's extremes and deltas.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx

from vtui.bench.types import Dist, ServerStep
from vtui.telemetry.metrics import MetricsSample, MetricsSnapshot, MetricsWindow, parse_metrics
from vtui.telemetry.promtext import HISTOGRAM_ROLES

TTFT = HISTOGRAM_ROLES["ttft"][0]  # vllm:time_to_first_token_seconds
# prometheus_client's process collector (every vLLM API server on Linux, and the sim): when a URL's
# scrapes answer with different start times that come back, a load balancer spreads them over replicas
START_TIME = "process_start_time_seconds"
FIRST_LOAD_SCRAPE_S = 0.1  # the first scrape during the load, after the load began


def start_time(text: str) -> float | None:
    """The payload's `process_start_time_seconds` (the telemetry reader keeps only `vllm:` families)."""
    at = text.find(START_TIME + " ")
    while at > 0 and text[at - 1] != "\n":
        at = text.find(START_TIME + " ", at + 1)
    if at < 0:
        return None
    line = text[at + len(START_TIME) + 1 : text.find("\n", at) if "\n" in text[at:] else len(text)]
    try:
        return float(line.split()[0])
    except (ValueError, IndexError):
        return None


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


class ServerWatch:
    """Scrapes `{base_url}/metrics` every `interval` seconds between `start()` and `stop()`; one scrape at
    a time (the next is armed only when the previous finished). The peaks (KV usage, waiting, running)
    are reported only when a scrape answered while the load ran: the baseline and final scrapes see an
    idle server, and a peak of 0 from them alone would say the cache stayed empty when nobody looked
    (a starved API server, or a step shorter than the interval)."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, interval: float = 0.5) -> None:
        self._client = client
        self._url = f"{base_url}/metrics"
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self._first: MetricsSnapshot | None = None
        self._last: MetricsSnapshot | None = None
        self._first_sample: MetricsSample | None = None
        self._last_sample: MetricsSample | None = None
        self._scrapes = 0
        self._load_scrapes = 0  # scrapes answered between start() and stop(): while the load ran
        self._kv: float | None = None
        self._waiting: float | None = None
        self._running: float | None = None
        self._starts: list[float] = []  # distinct process start times, in the order first seen
        self._last_start: float | None = None
        self._balancer = False

    async def _scrape(self) -> bool:
        """One scrape; True when it answered."""
        try:
            response = await self._client.get(self._url, timeout=5.0)
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        snap = parse_metrics(response.text)
        self._note_start(start_time(response.text))
        sample = MetricsWindow().update(snap, time.monotonic())
        self._scrapes += 1
        if self._first is None:
            self._first, self._first_sample = snap, sample
        self._last, self._last_sample = snap, sample
        self._kv = _max(self._kv, sample.kv_usage)
        self._waiting = _max(self._waiting, sample.waiting)
        self._running = _max(self._running, sample.running)
        return True

    def _note_start(self, start: float | None) -> None:
        """A start time seen before coming back after another one: scrapes reach several processes."""
        if start is None:
            return
        if self._last_start is not None and start != self._last_start and start in self._starts:
            self._balancer = True
        if start not in self._starts and len(self._starts) < 64:
            self._starts.append(start)
        self._last_start = start

    async def _loop(self) -> None:
        pause = min(self._interval, FIRST_LOAD_SCRAPE_S)  # a step shorter than the interval is seen too
        while True:
            await asyncio.sleep(pause)
            if await self._scrape():
                self._load_scrapes += 1
            pause = self._interval

    async def start(self) -> None:
        """Take the baseline scrape (and two more at once: a load balancer's round robin shows up as a
        start time that changes and comes back), then keep scraping in the background."""
        for _ in range(3):
            await self._scrape()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> ServerStep:
        """Stop scraping, take a final scrape, and summarize the step."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._scrape()
        return self.summary()

    def summary(self) -> ServerStep:
        first, last = self._first_sample, self._last_sample
        if self._first is None or self._last is None or first is None or last is None:
            return ServerStep(
                scrapes=self._scrapes,
                load_scrapes=self._load_scrapes,
                start_times=tuple(self._starts),
                behind_balancer=self._balancer,
            )
        preempt = None
        if first.preemptions_total is not None and last.preemptions_total is not None:
            preempt = max(0.0, last.preemptions_total - first.preemptions_total)
        gen = None
        if first.generation_tokens_total is not None and last.generation_tokens_total is not None:
            gen = max(0.0, last.generation_tokens_total - first.generation_tokens_total)
        ttft, requests = Dist(), None
        h_new, h_old = self._last.histogram(TTFT), self._first.histogram(TTFT)
        if h_new is not None and h_old is not None:
            delta = h_new.minus(h_old)
            if delta is not None and delta.observations > 0:
                requests = delta.observations
                mean = delta.sum / delta.count if delta.sum is not None and delta.count else None
                ttft = Dist(
                    mean=mean, p50=delta.quantile(0.5), p95=delta.quantile(0.95), p99=delta.quantile(0.99)
                )
        seen = self._load_scrapes > 0  # else the peaks are the idle server's, not the step's
        return ServerStep(
            scrapes=self._scrapes,
            load_scrapes=self._load_scrapes,
            kv_usage_peak=self._kv if seen else None,
            waiting_peak=self._waiting if seen else None,
            running_peak=self._running if seen else None,
            preemptions=preempt,
            requests=requests,
            ttft=ttft,
            generation_tokens=gen,
            start_times=tuple(self._starts),
            behind_balancer=self._balancer,
        )
