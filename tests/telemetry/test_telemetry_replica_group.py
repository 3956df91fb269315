"""A replica group's numbers (telemetry.replica_group): percentiles of the summed histograms (not the worst or
the mean of the replicas' percentiles), a sample carrying its window's buckets, and the median-based
imbalance check naming the slow or hot replica."""

from __future__ import annotations

import pytest

from vtui.telemetry.metrics import MetricsSample, MetricsWindow, Percentiles
from vtui.telemetry.promtext import parse_metrics
from vtui.telemetry.replica_group import imbalance, merged_percentiles

BOUNDS = (0.1, 1.0)


def sample(name: str, counts: tuple[float, ...] | None = None, **kw: object) -> MetricsSample:
    windowed = {"ttft": (BOUNDS, counts)} if counts else {}
    return MetricsSample(instance=name, at=0.0, windowed=windowed, **kw)  # type: ignore[arg-type]


def test_percentiles_come_from_the_summed_buckets() -> None:
    fast = sample("a", (100.0, 100.0, 100.0))  # 100 first tokens under 0.1 s
    slow = sample("b", (0.0, 100.0, 100.0))  # 100 between 0.1 and 1 s
    merged = merged_percentiles([fast, slow], "ttft")
    assert merged.p50 == pytest.approx(0.1)
    assert merged.p95 == pytest.approx(0.1 + 0.9 * 0.9)  # rank 190 of 200: 90 % into the second bucket
    assert merged.p95 < merged_percentiles([slow], "ttft").p95  # not the worst replica's p95
    other = MetricsSample(instance="c", at=0.0, windowed={"ttft": ((0.5, 2.0), (5.0, 5.0, 5.0))})
    assert merged_percentiles([fast, slow, other], "ttft") == merged  # other buckets: left out
    assert merged_percentiles([sample("d")], "ttft") == Percentiles()


def test_a_sample_carries_its_windows_ttft_buckets() -> None:
    def text(n: int) -> str:
        return (
            "# TYPE vllm:time_to_first_token_seconds histogram\n"
            f'vllm:time_to_first_token_seconds_bucket{{le="0.1"}} {n}\n'
            f'vllm:time_to_first_token_seconds_bucket{{le="1.0"}} {2 * n}\n'
            f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {2 * n}\n'
            f"vllm:time_to_first_token_seconds_count {2 * n}\nvllm:time_to_first_token_seconds_sum 1\n"
        )

    window = MetricsWindow()
    window.update(parse_metrics(text(10)), 0.0)
    later = window.update(parse_metrics(text(30)), 1.0)
    assert later.windowed["ttft"] == ((0.1, 1.0), (20.0, 40.0, 40.0))  # the window's deltas
    assert "itl" not in later.windowed  # no inter-token histogram in this payload


def test_imbalance_names_the_slow_then_the_hot_replica() -> None:
    def s(
        name: str, ttft95: float | None = None, kv: float | None = None, running: float = 0.0
    ) -> MetricsSample:
        return MetricsSample(
            instance=name, at=0.0, ttft=Percentiles(p95=ttft95), kv_usage=kv, running=running, waiting=0.0
        )

    slow = imbalance({"a": s("a", 0.2), "b": s("b", 0.2), "c": s("c", 0.9)})
    assert slow is not None and (slow.replica, slow.kind) == ("c", "slow") and "median" in slow.detail
    assert slow.short == "c slow"
    hot = imbalance({"a": s("a", kv=0.20), "b": s("b", kv=0.50)})
    assert hot is not None and (hot.replica, hot.kind) == ("b", "hot")
    busy = imbalance({"a": s("a", running=1), "b": s("b", running=10)})
    assert busy is not None and busy.replica == "b" and "in flight" in busy.detail
    assert imbalance({"a": s("a", 0.2, 0.3, 4), "b": s("b", 0.25, 0.35, 5)}) is None  # balanced
    assert imbalance({"a": s("a", 0.2)}) is None  # one replica: nothing to compare
