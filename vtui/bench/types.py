"""The load test's vocabulary: what to run (`BenchConfig`), what one request measured, what one step
measured (client side and, beside it, what the server's /metrics said), and the live progress the
TUI shows. All frozen, so the engine can hand them to any thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Mode = Literal["concurrency", "ramp", "rate"]


@dataclass(frozen=True)
class BenchConfig:
    """One load test against one OpenAI-compatible server."""

    base_url: str
    model: str | None = None  # None: the first model /v1/models lists
    mode: Mode = "concurrency"
    concurrency: int = 8  # fixed concurrency; the ramp's ceiling; the rate mode's cap (0 = none)
    levels: tuple[float, ...] = ()  # ramp concurrencies (default 1, 2, 4, … concurrency) or rates
    request_rate: float | None = None  # rate mode: mean requests per second (Poisson arrivals)
    num_requests: int = 64  # per step (ignored when duration_s is set)
    duration_s: float | None = None  # per step: keep sending until this many seconds passed
    input_len: int = 128  # synthetic prompt tokens
    output_len: int = 64  # max_tokens, with ignore_eos so every answer has exactly this length
    prompts_file: Path | None = None  # JSONL: {"prompt": …} or {"messages": …} [+ "max_tokens"], or strings
    endpoint: Literal["completions", "chat"] = "completions"
    seed: int = 0
    timeout_s: float = 300.0
    max_error_rate: float = 0.05  # ramp: stop after a step above this
    ttft_target_s: float | None = None  # ramp: stop after a step whose TTFT percentile exceeds this
    ttft_percentile: Literal["p50", "p95", "p99"] = "p95"
    scrape_metrics: bool = True
    scrape_interval_s: float = 0.5
    api_key: str | None = None
    token_id_range: tuple[int, int] = (100, 1000)  # synthetic prompts draw ids from here (any vocab > 1000)
    warmup_requests: int = 0
    # De-synchronised streams, like guidellm's and aiperf's: each closed-loop worker waits a seeded
    # uniform 0..jitter_s before its first request (0: all start at once, vtui's lock-step default),
    # and prompt/answer lengths may vary around input_len/output_len (normal, this standard deviation,
    # at least 1 token; aiperf's --synthetic-input-tokens-stddev, guidellm's prompt_tokens_stdev)
    jitter_s: float = 0.0
    input_len_stddev: float = 0.0
    output_len_stddev: float = 0.0

    def step_levels(self) -> tuple[float, ...]:
        """The steps this run walks through: concurrencies (fixed, ramp) or request rates (rate)."""
        if self.mode == "concurrency":
            return self.levels[:1] or (float(self.concurrency),)
        if self.mode == "rate":
            if self.levels:
                return self.levels
            if not self.request_rate:
                raise ValueError("rate mode needs a request rate")
            return (float(self.request_rate),)
        if self.levels:
            return self.levels
        out, level = [], 1
        while level < self.concurrency:
            out.append(float(level))
            level *= 2
        return (*out, float(self.concurrency))


@dataclass(frozen=True)
class RequestRecord:
    """One request as the client saw it. Times in seconds from the request's start."""

    ok: bool
    start: float  # perf_counter at send
    end: float
    ttft: float | None = None
    itls: tuple[float, ...] = ()  # gaps between successive streamed chunks
    prompt_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None

    @property
    def latency(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Dist:
    """A latency distribution in seconds (None when nothing was measured)."""

    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None

    def get(self, key: str) -> float | None:
        value: float | None = getattr(self, key)  # one of the fields above
        return value


@dataclass(frozen=True)
class ServerStep:
    """What the server's /metrics said during one step (None when not scraped or not reported)."""

    scrapes: int = 0
    load_scrapes: int = 0  # of them, those answered while the load ran; 0: the peaks below are None
    kv_usage_peak: float | None = None  # 0..1
    waiting_peak: float | None = None
    running_peak: float | None = None
    preemptions: float | None = None  # counter delta over the step
    requests: float | None = None  # TTFT histogram observations during the step
    ttft: Dist = field(default_factory=Dist)  # from the TTFT histogram delta (mean exact, pXX bucketed)
    generation_tokens: float | None = None
    # distinct `process_start_time_seconds` seen, in order: two or more that alternate mean the URL is a
    # load balancer spreading the scrapes over replicas (a restart changes it once and never goes back)
    start_times: tuple[float, ...] = ()
    behind_balancer: bool = False


@dataclass(frozen=True)
class StepResult:
    """One step of a run: one concurrency or one request rate."""

    index: int
    concurrency: int | None
    request_rate: float | None
    requests: int
    completed: int
    failed: int
    duration_s: float
    req_per_s: float
    output_tok_per_s: float
    total_tok_per_s: float
    ttft: Dist
    itl: Dist
    e2e: Dist
    tpot_mean: float | None
    server: ServerStep
    errors: tuple[tuple[str, int], ...] = ()  # (message, count), most frequent first
    breaks: str | None = None  # why the ramp stopped at this step

    @property
    def error_rate(self) -> float:
        return self.failed / self.requests if self.requests else 0.0

    @property
    def label(self) -> str:
        return f"rate={self.request_rate:g}" if self.request_rate is not None else f"c={self.concurrency}"


@dataclass(frozen=True)
class BenchResult:
    config: BenchConfig
    model: str
    started_at: float  # wall clock
    steps: tuple[StepResult, ...]
    stop_reason: str | None = None
    server_version: str | None = None


@dataclass(frozen=True)
class BenchProgress:
    """A live snapshot for the UI; `step` is set when a step has just finished."""

    step_index: int
    steps_total: int
    level: float  # concurrency or rate of the current step
    sent: int
    completed: int
    failed: int
    in_flight: int
    elapsed_s: float
    phase: Literal["step-start", "running", "step-done", "done"] = "running"
    step: StepResult | None = None
    message: str | None = None
