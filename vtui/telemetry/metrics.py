"""vLLM /metrics → one immutable `MetricsSample` per scrape: gauges as read, counters turned into rates,
histograms into p50/p95/p99 over a sliding window. Reads V1 and V0 names alike (the renames are in
promtext), sums data-parallel engines, and reports a missing value as None, never 0. A vllm-router's
Prometheus payload (`vllm_router_*`) gives a sample whose `router` and `routed` say what it routed.
"""

from __future__ import annotations

import copy
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from vtui.telemetry.promtext import (
    HISTOGRAM_ROLES,
    Histogram,
    MetricsSnapshot,
    parse_labels,
    parse_metrics,
)

__all__ = [
    "MetricsSample",
    "MetricsSnapshot",
    "MetricsWindow",
    "Percentiles",
    "RankSample",
    "parse_labels",
    "parse_metrics",
    "sample_of",
]

_EMPTY: Mapping[str, float] = MappingProxyType({})
_NO_WINDOWS: Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]] = MappingProxyType({})

# Prefix-cache counters, the newest name first. Each half is read on its own: a payload mid-rename (0.10)
# can hold the new name of one and the old name of the other.
_PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
_PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
_TOKEN_LABELS = ("kv_cache_size_tokens", "num_gpu_tokens", "kv_cache_tokens")
WINDOWED = ("ttft", "itl")  # the histograms a sample carries for merging (the fleet table's percentiles)
# vllm-router's counters (one key each in `_Point.counters`, summed over routes and error types)
_ROUTER_COUNTERS = (
    ("requests", "vllm_router_requests_total"),
    ("errors", "vllm_router_request_errors_total"),
    ("retries", "vllm_router_retries_total"),
)


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Latency percentiles in seconds; None when no request finished inside the window."""

    p50: float | None = None
    p95: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, hist: Histogram | None) -> Percentiles:
        if hist is None or hist.observations <= 0:
            return NO_PERCENTILES
        return cls(hist.quantile(0.50), hist.quantile(0.95), hist.quantile(0.99))


NO_PERCENTILES = Percentiles()


@dataclass(frozen=True, slots=True)
class RankSample:
    """One data-parallel engine (the `engine` label of vLLM's V1 metrics) of an instance. None = not
    reported by that engine."""

    engine: str
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0..1
    generation_tps: float | None = None


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """One scrape of one instance, ready for display. None = not reported (the UI shows "--").

    Slotted: a per-instance `__dict__` was most of a decoded idle sample's 2.9 KB (a dashboard's history
    keeps HistoryPoints, not samples: `benchmarks/bench_sample_memory.py`)."""

    instance: str | None
    at: float
    running: float | None = None
    waiting: float | None = None
    waiting_by_reason: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    kv_usage: float | None = None  # 0..1
    kv_capacity_tokens: int | None = None
    block_size: int | None = None
    prompt_tps: float | None = None
    generation_tps: float | None = None
    ttft: Percentiles = NO_PERCENTILES
    itl: Percentiles = NO_PERCENTILES
    e2e: Percentiles = NO_PERCENTILES
    queue: Percentiles = NO_PERCENTILES
    preemptions_per_s: float | None = None
    prefix_hit_rate: float | None = None  # 0..1
    success_per_s: float | None = None
    abort_per_s: float | None = None
    error_per_s: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    preemptions_total: float | None = None
    prefix_cache_queries_total: float | None = None
    prefix_cache_hits_total: float | None = None
    counter_reset: bool = False  # a counter went down since the last scrape: the server restarted
    vllm_names: str | None = None  # "v1" / "v0" / "mixed"
    engines: int | None = None  # data-parallel engines reporting (the `engine` label of any series)
    # `vllm:engine_sleep_state`: "awake", "weights_offloaded" (sleep level 1), "discard_all" (level 2), or
    # "mixed" when data-parallel engines differ; the level the deepest-sleeping engine is at
    sleep_state: str | None = None
    sleep_level: int | None = None
    # per engine, in engine order, when more than one reports (the totals above are their sum; kv_usage
    # their mean): a rank that lags or fills up shows here while the sum looks fine
    ranks: tuple[RankSample, ...] = ()
    # the window's TTFT and ITL histograms (role -> finite bucket bounds, cumulative counts ending with
    # +Inf's), so replicas' percentiles can be merged (`telemetry.replica_group`) rather than averaged
    windowed: Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]] = field(
        default_factory=lambda: _NO_WINDOWS
    )
    # a vllm-router's payload only: `requests_total`, `errors_total`, `retries_total` (since it started),
    # `active_workers`, and `requests_per_s`, `errors_per_s`, `retries_per_s` over the window (once two
    # scrapes are in it); `routed`: worker URL -> requests per second it was given over the window
    router: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    routed: Mapping[str, float] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """What an instance's history keeps of each sample: the figures its plots, sparklines, the fleet's
    trend column and the runtime diagnosis read, and nothing else. A dashboard keeps 600 an instance;
    a whole sample (histograms, percentiles, rates and counters) takes 3-4x the memory of one
    (`benchmarks/bench_sample_memory.py`). None = not reported, as in the sample."""

    at: float
    kv_usage: float | None = None  # 0..1
    running: float | None = None
    waiting: float | None = None
    prompt_tps: float | None = None
    generation_tps: float | None = None
    ttft_p95: float | None = None  # seconds
    preemptions_total: float | None = None

    @classmethod
    def of(cls, s: MetricsSample) -> HistoryPoint:
        return cls(
            s.at, s.kv_usage, s.running, s.waiting, s.prompt_tps, s.generation_tps, s.ttft.p95,
            s.preemptions_total,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class HistoryBackfill:
    """A newly attached dashboard's start of one instance's history (the session supervisor's): the
    points before its newest sample, oldest first, and that sample whole."""

    instance: str
    points: tuple[HistoryPoint, ...]
    latest: MetricsSample


@dataclass(frozen=True)
class _Point:
    """The cumulative values of one scrape that rates and windows are computed from."""

    at: float
    counters: Mapping[str, float]
    finished: Mapping[str, float]
    histograms: Mapping[str, Histogram]
    generation_by_engine: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    routed: Mapping[str, float] = field(default_factory=lambda: _EMPTY)  # a router's, per worker URL


def _kv_capacity(snap: MetricsSnapshot) -> tuple[int | None, int | None]:
    """(tokens, block size) from `vllm:cache_config_info` labels, summed over engines."""
    per_engine: dict[str, int] = {}
    block_size: int | None = None
    for labels, _ in snap.labelled("vllm:cache_config_info"):
        engine = labels.get("engine", "")
        bs = _as_int(labels.get("block_size"))
        block_size = block_size or bs
        tokens = next((t for t in (_as_int(labels.get(k)) for k in _TOKEN_LABELS) if t is not None), None)
        if tokens is None:
            blocks = _as_int(labels.get("num_gpu_blocks"))
            tokens = blocks * bs if blocks is not None and bs is not None else None
        if tokens is not None:
            per_engine[engine] = tokens
    return (sum(per_engine.values()) if per_engine else None), block_size


# Series whose `engine` label says how many data-parallel engines report (any one of them may be all a
# payload holds: a paste of the cache config, the sleep state)
_ENGINE_FAMILIES = (
    "vllm:num_requests_running",
    "vllm:cache_config_info",
    "vllm:engine_sleep_state",
    "vllm:engine_sleep_level",
    "vllm:generation_tokens_total",
)
_SLEEP_LEVELS = {"awake": 0, "weights_offloaded": 1, "discard_all": 2}


def _engines(snap: MetricsSnapshot) -> set[str | None]:
    for name in _ENGINE_FAMILIES:
        engines = {labels.get("engine") for labels, _ in snap.labelled(name)}
        if engines:
            return engines
    return set()


def _sleep(snap: MetricsSnapshot) -> tuple[str | None, int | None]:
    """(state, level) from `vllm:engine_sleep_state` (1 on the engine's state) or a sleep-level gauge."""
    states: dict[str, str] = {}  # engine -> its state
    for labels, value in snap.labelled("vllm:engine_sleep_state"):
        state = labels.get("sleep_state")
        if state is not None and value >= 1:
            states[labels.get("engine", "")] = state
    levels = [_SLEEP_LEVELS[s] for s in states.values() if s in _SLEEP_LEVELS]
    level_gauge = [v for _, v in snap.labelled("vllm:engine_sleep_level") if math.isfinite(v)]
    level = int(max(level_gauge)) if level_gauge else max(levels) if levels else None
    if len(set(states.values())) > 1:
        return "mixed", level
    if states:
        return next(iter(states.values())), level
    names = {v: k for k, v in _SLEEP_LEVELS.items()}
    return (names.get(level) if level is not None else None), level


def _as_int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) else None


def _kv_usage(snap: MetricsSnapshot) -> float | None:
    for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
        value = snap.mean(name)  # a fraction per engine: the mean, not the sum
        if value is not None:
            return value
    return None


def _point(snap: MetricsSnapshot, at: float) -> _Point:
    counters: dict[str, float] = {}
    for key, name in (
        ("prompt", "vllm:prompt_tokens_total"),
        ("generation", "vllm:generation_tokens_total"),
        ("preemptions", "vllm:num_preemptions_total"),
    ):
        value = snap.total(name)
        if value is not None:
            counters[key] = value
    q = next((v for v in map(snap.total, _PREFIX_QUERIES) if v is not None), None)
    h = next((v for v in map(snap.total, _PREFIX_HITS) if v is not None), None)
    if q is not None:  # each on its own: a payload can hold one without the other
        counters["prefix_queries"] = q
    if h is not None:
        counters["prefix_hits"] = h
    finished = snap.by_label("vllm:request_success_total", "finished_reason")
    histograms: dict[str, Histogram] = {}
    for role, names in HISTOGRAM_ROLES.items():
        for name in names:
            hist = snap.histogram(name)
            if hist is not None:
                histograms[role] = hist
                break
    by_engine = snap.by_label("vllm:generation_tokens_total", "engine")
    routed: Mapping[str, float] = _EMPTY
    if snap.has("vllm_router_active_workers"):  # a router: its counters are 0 until they first count
        for key, name in _ROUTER_COUNTERS:
            counters[f"router_{key}"] = snap.total(name) or 0.0
        routed = MappingProxyType(snap.by_label("vllm_router_processed_requests_total", "worker"))
    return _Point(
        at,
        counters,
        finished,
        histograms,
        MappingProxyType(by_engine) if len(by_engine) > 1 else _EMPTY,
        routed,
    )


def _router(
    snap: MetricsSnapshot, point: _Point, base: _Point | None
) -> tuple[Mapping[str, float], Mapping[str, float]]:
    """A router's figures (`MetricsSample.router`, `.routed`): totals, and rates over the window."""
    if "router_requests" not in point.counters:
        return _EMPTY, _EMPTY
    figures = {f"{key}_total": point.counters[f"router_{key}"] for key, _ in _ROUTER_COUNTERS}
    active = snap.total("vllm_router_active_workers")
    if active is not None:
        figures["active_workers"] = active
    routed: dict[str, float] = {}
    dt = point.at - base.at if base is not None else 0.0
    if base is not None and dt > 0 and "router_requests" in base.counters:
        for key, _ in _ROUTER_COUNTERS:
            figures[f"{key}_per_s"] = (point.counters[f"router_{key}"] - base.counters[f"router_{key}"]) / dt
        for worker, total in point.routed.items():  # a worker first counted since `base` started at 0
            routed[worker] = (total - base.routed.get(worker, 0.0)) / dt
    return MappingProxyType(figures), (MappingProxyType(routed) if routed else _EMPTY)


def _engine_key(engine: str) -> tuple[int, str]:
    return (int(engine), "") if engine.isdigit() else (1 << 30, engine)


def _ranks(snap: MetricsSnapshot, point: _Point, prev: _Point | None) -> tuple[RankSample, ...]:
    """Per data-parallel engine figures, when more than one engine reports."""
    running = snap.by_label("vllm:num_requests_running", "engine")
    if len(running) < 2:
        return ()
    waiting = snap.by_label("vllm:num_requests_waiting", "engine")
    kv: dict[str, float] = {}
    for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
        kv = snap.by_label(name, "engine")
        if kv:
            break
    dt = point.at - prev.at if prev is not None else 0.0
    out = []
    for engine in sorted(running, key=_engine_key):
        tps = None
        before = prev.generation_by_engine.get(engine) if prev is not None else None
        now = point.generation_by_engine.get(engine)
        if before is not None and now is not None and dt > 0 and now >= before:
            tps = (now - before) / dt
        out.append(RankSample(engine, running.get(engine), waiting.get(engine), kv.get(engine), tps))
    return tuple(out)


def _same(a: _Point, b: _Point) -> bool:
    """Both points hold one snapshot's values (`MetricsWindow._of` shares them while it repeats)."""
    return (
        a.counters is b.counters
        and a.finished is b.finished
        and a.histograms is b.histograms
        and a.generation_by_engine is b.generation_by_engine
    )


def _went_down(new: _Point, old: _Point) -> bool:
    for key, value in new.counters.items():
        if key in old.counters and value < old.counters[key]:
            return True
    for key, value in new.finished.items():
        if key in old.finished and value < old.finished[key]:
            return True
    for role, hist in new.histograms.items():
        before = old.histograms.get(role)
        if before is not None and hist.observations < before.observations:
            return True
    return False


def _rate(new: _Point, old: _Point | None, key: str) -> float | None:
    if old is None or key not in new.counters or key not in old.counters:
        return None
    dt = new.at - old.at
    return (new.counters[key] - old.counters[key]) / dt if dt > 0 else None


def _finished_rates(new: _Point, old: _Point | None) -> tuple[float | None, float | None, float | None]:
    """(success, abort, error) per second from `request_success_total` by `finished_reason`."""
    if old is None or not new.finished or not old.finished:
        return None, None, None
    dt = new.at - old.at
    if dt <= 0:
        return None, None, None

    def delta(reasons: set[str] | None, exclude: tuple[str, ...] = ()) -> float | None:
        keys = [k for k in new.finished if (reasons is None or k in reasons) and k not in exclude]
        if not keys:
            return None
        return sum(new.finished[k] - old.finished.get(k, 0.0) for k in keys) / dt

    return delta(None, ("abort", "error")), delta({"abort"}), delta({"error"})


# What a sample takes from its snapshot alone (kept while the parser hands back the same snapshot): KV
# capacity and block size, waiting by reason, engines, running, waiting, KV usage, metric names, sleep.
_Derived = tuple[
    tuple[int | None, int | None],
    Mapping[str, float],
    int | None,
    float | None,
    float | None,
    float | None,
    str | None,
    tuple[str | None, int | None],
]


class MetricsWindow:
    """Turns successive snapshots of one instance into samples: counter rates between consecutive
    scrapes, percentiles and the prefix hit rate over the last `window_s` seconds. A counter that goes
    down (a restart) empties the window and is reported once as `counter_reset=True`."""

    def __init__(self, window_s: float = 60.0, max_points: int = 4096) -> None:
        self.window_s = window_s
        self._points: deque[_Point] = deque(maxlen=max_points)
        # what the last snapshot gave that depends on it alone: a MetricsParser hands back the same
        # snapshot object while the payload's vtui lines stay the same (a steady server)
        self._last: tuple[MetricsSnapshot, _Point, _Derived] | None = None
        # the last sample of a steady server (see update), for the next one of the same snapshot and base
        self._steady: tuple[MetricsSnapshot, str | None, _Point, MetricsSample] | None = None

    def _of(self, snap: MetricsSnapshot, at: float) -> tuple[_Point, _Derived]:
        last = self._last
        if last is not None and last[0] is snap:
            p = last[1]
            return _Point(at, p.counters, p.finished, p.histograms, p.generation_by_engine, p.routed), last[2]
        point = _point(snap, at)
        by_reason = snap.by_label("vllm:num_requests_waiting_by_reason", "reason")
        engines = _engines(snap)
        derived: _Derived = (
            _kv_capacity(snap),
            MappingProxyType(by_reason) if by_reason else _EMPTY,
            len(engines) if engines else None,
            snap.total("vllm:num_requests_running"),
            snap.total("vllm:num_requests_waiting"),
            _kv_usage(snap),
            snap.vllm_names,
            _sleep(snap),
        )
        self._last = (snap, point, derived)
        return point, derived

    def reset(self) -> None:
        self._points.clear()
        self._steady = None

    def update(self, snap: MetricsSnapshot, at: float, instance: str | None = None) -> MetricsSample:
        point, derived = self._of(snap, at)
        points = self._points
        reset = bool(points) and _went_down(point, points[-1])
        if reset:
            points.clear()
        while points and (points[0].at < at - self.window_s or points[0].at > at):
            points.popleft()
        prev = points[-1] if points else None
        base = points[0] if points else None
        # Steady: the previous point is this snapshot's too (an idle server), so every rate is 0, and the
        # window's figures depend on its first point alone: with the same snapshot and the same first
        # point's values as the last steady sample, the sample is that one at this time.
        steady = prev is not None and base is not None and at > prev.at and _same(prev, point)
        last = self._steady
        if (
            steady
            and last is not None
            and base is not None
            and last[0] is snap
            and last[1] == instance
            and _same(last[2], base)
        ):
            sample = copy.copy(last[3])
            object.__setattr__(sample, "at", at)  # a frozen dataclass's field, set as its __init__ does
            points.append(point)
            return sample
        sample = self._sample(snap, point, derived, prev, base, reset, at, instance)
        self._steady = (snap, instance, base, sample) if steady and base is not None else None
        points.append(point)
        return sample

    def _sample(
        self,
        snap: MetricsSnapshot,
        point: _Point,
        derived: _Derived,
        prev: _Point | None,
        base: _Point | None,
        reset: bool,
        at: float,
        instance: str | None,
    ) -> MetricsSample:
        (capacity, block_size), by_reason, engines, running, waiting, kv_usage, vllm_names, sleep = derived

        percentiles: dict[str, Percentiles] = {}
        windowed: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
        for role in HISTOGRAM_ROLES:
            hist = point.histograms.get(role)
            if hist is not None and base is not None and role in base.histograms:
                hist = hist.minus(base.histograms[role])
            percentiles[role] = Percentiles.of(hist)
            if role in WINDOWED and hist is not None and hist.observations > 0:
                windowed[role] = (hist.bounds[:-1], hist.counts)

        success, abort, error = _finished_rates(point, prev)
        router, routed = _router(snap, point, base)
        return MetricsSample(
            instance=instance,
            at=at,
            running=running,
            waiting=waiting,
            waiting_by_reason=by_reason,
            kv_usage=kv_usage,
            kv_capacity_tokens=capacity,
            block_size=block_size,
            prompt_tps=_rate(point, prev, "prompt"),
            generation_tps=_rate(point, prev, "generation"),
            ttft=percentiles["ttft"],
            itl=percentiles["itl"],
            e2e=percentiles["e2e"],
            queue=percentiles["queue"],
            preemptions_per_s=_rate(point, prev, "preemptions"),
            prefix_hit_rate=self._prefix_hit_rate(snap, point, base),
            success_per_s=success,
            abort_per_s=abort,
            error_per_s=error,
            prompt_tokens_total=point.counters.get("prompt"),
            generation_tokens_total=point.counters.get("generation"),
            preemptions_total=point.counters.get("preemptions"),
            prefix_cache_queries_total=point.counters.get("prefix_queries"),
            prefix_cache_hits_total=point.counters.get("prefix_hits"),
            counter_reset=reset,
            vllm_names=vllm_names,
            engines=engines,
            sleep_state=sleep[0],
            sleep_level=sleep[1],
            ranks=_ranks(snap, point, prev),
            windowed=MappingProxyType(windowed) if windowed else _NO_WINDOWS,
            router=router,
            routed=routed,
        )

    @staticmethod
    def _prefix_hit_rate(snap: MetricsSnapshot, point: _Point, base: _Point | None) -> float | None:
        if "prefix_queries" in point.counters and "prefix_hits" in point.counters:
            queries, hits = point.counters["prefix_queries"], point.counters["prefix_hits"]
            if base is not None and "prefix_queries" in base.counters and "prefix_hits" in base.counters:
                queries -= base.counters["prefix_queries"]
                hits -= base.counters["prefix_hits"]
            return hits / queries if queries > 0 else None
        gauge = snap.mean("vllm:gpu_prefix_cache_hit_rate")  # V0: already a 0..1 rate
        return gauge if gauge is not None and gauge >= 0 else None


def sample_of(text: str, instance: str | None = None, at: float = 0.0) -> MetricsSample:
    """One payload on its own (`vtui metrics FILE`): rates None, percentiles since the server started."""
    return MetricsWindow().update(parse_metrics(text), at, instance)
