"""Parse a real vLLM 0.32 /metrics payload (51 KB) with vtui's parser and with prometheus_client's text
parser, side by side, and check both read the same values for every sample vtui keeps.

    python benchmarks/bench_parse.py [PAYLOAD] [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from pathlib import Path

import _smoke
from prometheus_client.parser import text_string_to_metric_families

from vtui.telemetry.metrics import MetricsWindow
from vtui.telemetry.promtext import WANTED, parse_labels, parse_metrics

DEFAULT = Path(__file__).resolve().parent.parent / "tests" / "telemetry" / "fixtures" / "metrics_busy.txt"


def ours_values(text: str) -> Counter:
    snap = parse_metrics(text)
    return Counter(
        (name, frozenset(labels.items()), value)
        for name in snap.series
        for labels, value in snap.labelled(name)
    )


def reference_values(text: str) -> Counter:
    return Counter(
        (s.name, frozenset(s.labels.items()), s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name in WANTED
    )


def best_of(fn, repeat: int, number: int) -> float:
    """Median seconds per call over `repeat` rounds of `number` calls."""
    rounds = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - start) / number)
    return statistics.median(rounds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("payload", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=7)
    _smoke.tiny(ap, repeat=1)
    args = ap.parse_args()
    text = args.payload.read_text()

    ours, ref = ours_values(text), reference_values(text)
    identical = ours == ref

    def cold() -> None:  # parse + build a sample with an empty label cache: the first scrape
        parse_labels.cache_clear()
        MetricsWindow().update(parse_metrics(text), 0.0)

    window = MetricsWindow()
    clock = iter(range(10**9))
    t_prom = best_of(lambda: list(text_string_to_metric_families(text)), args.repeat, 20)
    t_parse = best_of(lambda: parse_metrics(text), args.repeat, 200)
    t_sample = best_of(lambda: window.update(parse_metrics(text), float(next(clock))), args.repeat, 200)
    t_cold = best_of(cold, args.repeat, 50)

    print(f"payload: {args.payload.name}, {len(text) / 1024:.1f} KiB, {text.count(chr(10))} lines")
    print(f"{'parser':<44}{'ms/payload':>12}{'speed-up':>10}")
    print(f"{'prometheus_client text_string_to_metric_families':<44}{t_prom * 1e3:>12.3f}{'1.0x':>10}")
    for label, t in (
        ("vtui parse_metrics", t_parse),
        ("vtui parse_metrics + MetricsWindow.update", t_sample),
        ("  same, label cache cleared (first scrape)", t_cold),
    ):
        print(f"{label:<44}{t * 1e3:>12.3f}{t_prom / t:>9.1f}x")
    print(f"samples compared: {sum(ours.values())}; identical values: {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
