"""A replica group's numbers (`replicas = N`): percentiles of the merged histograms, and the imbalance
check that names the slow or hot replica.

Percentiles of a group are read from the sum of its replicas' windowed bucket counts (what a Prometheus
`histogram_quantile(sum by (le) …)` gives), never from an average of percentiles. The imbalance check is
median-based, as vllm-htop's: a replica is *slow* when its TTFT p95 (or ITL p95) is more than 1.5× the
group's median, *hot* when its KV cache use is more than 15 points above the least used replica's, or
its load (running + waiting) more than 1.5× the median and at least 4 requests above it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from vtui.telemetry.metrics import MetricsSample, Percentiles
from vtui.telemetry.promtext import histogram_quantile

SLOW_RATIO = 1.5
HOT_KV_POINTS = 0.15
HOT_LOAD_RATIO = 1.5
HOT_LOAD_MIN = 4.0


def merged_percentiles(samples: Iterable[MetricsSample], role: str) -> Percentiles:
    """p50/p95/p99 of the replicas' `role` histograms ("ttft", "itl") summed bucket by bucket; replicas
    whose buckets differ from the first one's are left out (one vLLM version per group is the rule)."""
    bounds: tuple[float, ...] | None = None
    total: list[float] = []
    for sample in samples:
        pair = sample.windowed.get(role)
        if not pair:
            continue
        le, counts = tuple(pair[0]), tuple(pair[1])
        if bounds is None:
            bounds, total = le, list(counts)
        elif le == bounds and len(counts) == len(total):
            total = [a + b for a, b in zip(total, counts, strict=True)]
    if bounds is None or not total or total[-1] <= 0:
        return Percentiles()
    full, cum = (*bounds, float("inf")), tuple(total)
    return Percentiles(*(histogram_quantile(q, full, cum) for q in (0.5, 0.95, 0.99)))


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass(frozen=True)
class Imbalance:
    replica: str
    kind: str  # "slow" or "hot"
    detail: str  # e.g. "TTFT p95 0.84 s is 2.1× the median 0.40 s"

    @property
    def short(self) -> str:
        return f"{self.replica} {self.kind}"


def imbalance(samples: Mapping[str, MetricsSample]) -> Imbalance | None:
    """The slow or hot replica of a group (name -> its latest sample), the slow one first; None when
    fewer than two replicas report or none stands out."""
    for role, label in (("ttft", "TTFT"), ("itl", "ITL")):
        values = {n: getattr(s, role).p95 for n, s in samples.items() if getattr(s, role).p95 is not None}
        if len(values) >= 2:
            mid = median(list(values.values()))
            name = max(values, key=lambda n: values[n])
            if mid > 0 and values[name] > SLOW_RATIO * mid:
                ratio = values[name] / mid
                return Imbalance(
                    name, "slow", f"{label} p95 {values[name]:.3g} s is {ratio:.1f}× the median {mid:.3g} s"
                )
    kv = {n: s.kv_usage for n, s in samples.items() if s.kv_usage is not None}
    if len(kv) >= 2:
        name = max(kv, key=lambda n: kv[n])
        if kv[name] - min(kv.values()) > HOT_KV_POINTS:
            return Imbalance(name, "hot", f"KV cache {kv[name]:.0%}, others as low as {min(kv.values()):.0%}")
    load = {
        n: (s.running or 0.0) + (s.waiting or 0.0)
        for n, s in samples.items()
        if s.running is not None or s.waiting is not None
    }
    if len(load) >= 2:
        mid = median(list(load.values()))
        name = max(load, key=lambda n: load[n])
        if load[name] - mid >= HOT_LOAD_MIN and load[name] > HOT_LOAD_RATIO * mid:
            return Imbalance(name, "hot", f"{load[name]:g} requests in flight, the median is {mid:g}")
    return None
