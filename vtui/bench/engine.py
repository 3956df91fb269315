"""`run_bench(config, on_progress) -> BenchResult`: the load generator behind `vtui bench` and the TUI's
bench screen. Textual-free; progress goes to a plain callback.

Modes: fixed concurrency (N workers, each sending the next request as soon as its last one ends);
a concurrency ramp (1, 2, 4, … N) that stops after the step whose error rate or TTFT breaks the target;
request rate (seeded Poisson arrivals, optionally capped at `concurrency` in flight).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Literal

import httpx

from vtui.bench.client import make_client, payloads, send, served_model, server_version
from vtui.bench.server import ServerWatch
from vtui.bench.stats import summarize
from vtui.bench.types import BenchConfig, BenchProgress, BenchResult, RequestRecord, ServerStep, StepResult

ProgressCallback = Callable[[BenchProgress], None]
_PROGRESS_EVERY_S = 0.2


class _Step:
    """Counters of the running step, and the throttled progress reporting."""

    def __init__(self, index: int, total: int, level: float, on_progress: ProgressCallback | None) -> None:
        self.index, self.total, self.level = index, total, level
        self.on_progress = on_progress
        self.records: list[RequestRecord] = []
        self.sent = 0
        self.started = time.perf_counter()
        self._last_report = 0.0

    def progress(
        self,
        phase: Literal["step-start", "running", "step-done", "done"] = "running",
        step: StepResult | None = None,
        message: str | None = None,
        force: bool = False,
    ) -> None:
        if self.on_progress is None:
            return
        now = time.perf_counter()
        if not force and now - self._last_report < _PROGRESS_EVERY_S:
            return
        self._last_report = now
        failed = sum(1 for r in self.records if not r.ok)
        self.on_progress(
            BenchProgress(
                step_index=self.index,
                steps_total=self.total,
                level=self.level,
                sent=self.sent,
                completed=len(self.records) - failed,
                failed=failed,
                in_flight=self.sent - len(self.records),
                elapsed_s=now - self.started,
                phase=phase,
                step=step,
                message=message,
            )
        )

    async def one(self, client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> None:
        self.sent += 1
        self.records.append(await send(client, url, body))
        self.progress()


def _budget(config: BenchConfig) -> tuple[int | None, float | None]:
    """(requests, deadline seconds) bounding a step."""
    if config.duration_s:
        return None, config.duration_s
    return max(1, config.num_requests), None


async def _concurrency_step(
    step: _Step,
    config: BenchConfig,
    client: httpx.AsyncClient,
    url: str,
    bodies: Iterator[dict[str, Any]],
    workers: int,
) -> None:
    limit, seconds = _budget(config)
    deadline = step.started + seconds if seconds else None

    jitter = random.Random(config.seed + 11 + step.index)

    async def worker(delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        while True:
            if limit is not None and step.sent >= limit:
                return
            if deadline is not None and time.perf_counter() >= deadline:
                return
            await step.one(client, url, next(bodies))

    delays = [
        jitter.uniform(0.0, config.jitter_s) if config.jitter_s > 0 else 0.0 for _ in range(max(1, workers))
    ]
    await asyncio.gather(*(worker(d) for d in delays))


async def _rate_step(
    step: _Step,
    config: BenchConfig,
    client: httpx.AsyncClient,
    url: str,
    bodies: Iterator[dict[str, Any]],
    rate: float,
    rng: random.Random,
) -> None:
    limit, seconds = _budget(config)
    cap = asyncio.Semaphore(config.concurrency) if config.concurrency > 0 else None
    tasks: list[asyncio.Task[None]] = []
    next_at = time.perf_counter()

    async def capped(body: dict[str, Any]) -> None:
        if cap is None:
            await step.one(client, url, body)
            return
        async with cap:
            await step.one(client, url, body)

    count = 0
    while True:
        if limit is not None and count >= limit:
            break
        if seconds is not None and next_at - step.started >= seconds:
            break
        delay = next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(capped(next(bodies))))
        count += 1
        next_at += rng.expovariate(rate)
    await asyncio.gather(*tasks)


def _breaks(config: BenchConfig, result: StepResult) -> str | None:
    if config.mode != "ramp":
        return None
    if result.error_rate > config.max_error_rate:
        return f"error rate {result.error_rate:.1%} > {config.max_error_rate:.1%}"
    if config.ttft_target_s is not None:
        value = result.ttft.get(config.ttft_percentile)
        if value is None or value > config.ttft_target_s:
            shown = "--" if value is None else f"{value:.3f}s"
            return f"TTFT {config.ttft_percentile} {shown} > target {config.ttft_target_s:.3f}s"
    return None


async def run_bench(config: BenchConfig, on_progress: ProgressCallback | None = None) -> BenchResult:
    """Run every step of `config` against its server and return the results (never raises on request
    failures: they are counted; raises ValueError/httpx errors only when the server cannot be queried)."""
    base = config.base_url.rstrip("/")
    url = f"{base}/v1/chat/completions" if config.endpoint == "chat" else f"{base}/v1/completions"
    levels = config.step_levels()
    most = int(max(levels)) if config.mode != "rate" else max(config.concurrency, 64)
    started_at = time.time()
    https = base.startswith("https")
    async with make_client(most, config.timeout_s, config.api_key, https) as client:
        model = config.model or await served_model(client, base)
        version = await server_version(client, base)
        bodies = payloads(config, model)
        if config.warmup_requests:
            warm = _Step(-1, len(levels), 0, None)
            warm_config = replace(config, num_requests=config.warmup_requests, duration_s=None)
            await _concurrency_step(
                warm, warm_config, client, url, bodies, min(config.warmup_requests, int(levels[0]) or 1)
            )
        rng = random.Random(config.seed + 1)
        steps: list[StepResult] = []
        stop_reason = None
        metrics_client = make_client(2, 10.0, config.api_key, https) if config.scrape_metrics else None
        try:
            for index, level in enumerate(levels):
                step = _Step(index, len(levels), level, on_progress)
                step.progress("step-start", force=True)
                watch = (
                    ServerWatch(metrics_client, base, config.scrape_interval_s) if metrics_client else None
                )
                if watch:
                    await watch.start()
                step.started = time.perf_counter()
                if config.mode == "rate":
                    await _rate_step(step, config, client, url, bodies, level, rng)
                else:
                    await _concurrency_step(step, config, client, url, bodies, int(level))
                duration = time.perf_counter() - step.started
                server = await watch.stop() if watch else ServerStep()
                result = summarize(
                    index,
                    step.records,
                    duration,
                    server=server,
                    concurrency=None if config.mode == "rate" else int(level),
                    request_rate=level if config.mode == "rate" else None,
                )
                reason = _breaks(config, result)
                if reason:
                    result = replace(result, breaks=reason)
                steps.append(result)
                step.progress("step-done", step=result, message=reason, force=True)
                if reason:
                    stop_reason = f"stopped at {result.label}: {reason}"
                    break
        finally:
            if metrics_client is not None:
                await metrics_client.aclose()
    bench = BenchResult(
        config=config,
        model=model,
        started_at=started_at,
        steps=tuple(steps),
        stop_reason=stop_reason,
        server_version=version,
    )
    if on_progress is not None and steps:
        last = steps[-1]
        on_progress(
            BenchProgress(
                step_index=last.index,
                steps_total=len(levels),
                level=levels[last.index],
                sent=last.requests,
                completed=last.completed,
                failed=last.failed,
                in_flight=0,
                elapsed_s=time.time() - started_at,
                phase="done",
                step=last,
                message=stop_reason,
            )
        )
    return bench
