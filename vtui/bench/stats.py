"""Per-step summaries of request records: throughput, latency percentiles, errors; and for repeated
runs of one figure, their spread and Welch's confidence interval of a difference (`welch`: the tuner's
noise rule)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from vtui.bench.types import Dist, RequestRecord, ServerStep, StepResult


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default) of already sorted values; q in 0..100."""
    if not sorted_values:
        return None
    rank = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (rank - lo)


def dist(values: Sequence[float]) -> Dist:
    if not values:
        return Dist()
    ordered = sorted(values)
    return Dist(
        mean=math.fsum(ordered) / len(ordered),
        p50=percentile(ordered, 50),
        p95=percentile(ordered, 95),
        p99=percentile(ordered, 99),
    )


def summarize(
    index: int,
    records: Sequence[RequestRecord],
    duration_s: float,
    *,
    concurrency: int | None,
    request_rate: float | None,
    server: ServerStep,
) -> StepResult:
    """One step's figures. Throughput divides by the step's wall time (first send to last answer)."""
    ok = [r for r in records if r.ok]
    failed = len(records) - len(ok)
    duration = max(duration_s, 1e-9)
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    itls = [gap for r in ok for gap in r.itls]
    tpots = [
        (r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.ttft is not None and r.output_tokens > 1
    ]
    errors = Counter(r.error or "unknown error" for r in records if not r.ok)
    return StepResult(
        index=index,
        concurrency=concurrency,
        request_rate=request_rate,
        requests=len(records),
        completed=len(ok),
        failed=failed,
        duration_s=duration_s,
        req_per_s=len(ok) / duration,
        output_tok_per_s=out_tokens / duration,
        total_tok_per_s=(out_tokens + in_tokens) / duration,
        ttft=dist([r.ttft for r in ok if r.ttft is not None]),
        itl=dist(itls),
        e2e=dist([r.latency for r in ok]),
        tpot_mean=math.fsum(tpots) / len(tpots) if tpots else None,
        server=server,
        errors=tuple(errors.most_common(5)),
    )


# -- repeated runs: their spread, and whether two sets of runs differ beyond their noise ----------------
@dataclass(frozen=True)
class Spread:
    """Runs of one figure: how many, their mean, sample standard deviation (0 for one run), range."""

    n: int
    mean: float
    stdev: float
    low: float
    high: float

    def to_json(self) -> dict[str, float | int]:
        return {
            "n": self.n,
            "mean": round(self.mean, 4),
            "stdev": round(self.stdev, 4),
            "min": round(self.low, 4),
            "max": round(self.high, 4),
        }


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("no values")
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return Spread(n, mean, math.sqrt(var), min(values), max(values))


@dataclass(frozen=True)
class Difference:
    """mean(a) - mean(b) with its two-sided confidence interval (Welch's t: unequal variances)."""

    delta: float
    low: float
    high: float
    df: float
    confidence: float

    @property
    def clear(self) -> bool:
        """The interval excludes 0: the difference is beyond the runs' noise."""
        return self.low > 0 or self.high < 0

    def to_json(self) -> dict[str, float]:
        return {
            "delta": round(self.delta, 4),
            "low": round(self.low, 4),
            "high": round(self.high, 4),
            "df": round(self.df, 2) if math.isfinite(self.df) else -1.0,
            "confidence": self.confidence,
        }


def welch(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Difference | None:
    """Welch's confidence interval of mean(a) - mean(b); None when either side has fewer than 2 runs
    (no spread to judge by). Identical runs on both sides (spread 0) make a point interval."""
    if len(a) < 2 or len(b) < 2:
        return None
    sa, sb = spread(a), spread(b)
    va, vb = sa.stdev**2 / sa.n, sb.stdev**2 / sb.n
    delta = sa.mean - sb.mean
    se = math.sqrt(va + vb)
    if se == 0.0:
        return Difference(delta, delta, delta, math.inf, confidence)
    df = (va + vb) ** 2 / ((va**2 / (sa.n - 1) if va else 0.0) + (vb**2 / (sb.n - 1) if vb else 0.0))
    half = t_quantile(0.5 + confidence / 2, df) * se
    return Difference(delta, delta - half, delta + half, df, confidence)


def t_quantile(p: float, df: float) -> float:
    """The p-quantile (p > 0.5) of Student's t with `df` (any real > 0) degrees of freedom, by bisection
    on its CDF (the regularized incomplete beta function); no SciPy."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            return math.inf
    for _ in range(100):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def t_cdf(t: float, df: float) -> float:
    x = df / (df + t * t)
    tail = 0.5 * _betai(df / 2, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def _betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (Numerical Recipes' continued fraction)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        if abs(d * c - 1.0) < 3e-14:
            break
    return h
