"""Per-step summaries of request records: throughput, latency percentiles, errors."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

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
