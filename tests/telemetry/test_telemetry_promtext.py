"""The fast /metrics parser reads exactly what prometheus_client reads, tolerates damage, and the
histogram quantile matches Prometheus' histogram_quantile."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vtui.telemetry.promtext import WANTED, MetricsParser, histogram_quantile, parse_labels, parse_metrics

FIXTURES = Path(__file__).parent / "fixtures"
PAYLOADS = sorted(p.name for p in FIXTURES.glob("metrics_*.txt"))


def _ours(text: str) -> Counter:
    snap = parse_metrics(text)
    return Counter((n, frozenset(lab.items()), v) for n in snap.series for lab, v in snap.labelled(n))


def _reference(text: str) -> Counter:
    return Counter(
        (s.name, frozenset(s.labels.items()), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name in WANTED
    )


@pytest.mark.parametrize("name", PAYLOADS)
def test_values_identical_to_prometheus_client(name: str, fixture_text) -> None:
    text = fixture_text(name)
    ours = _ours(text)
    assert ours, "nothing parsed"
    assert ours == _reference(text)


def test_the_remembering_parser_reads_what_parse_metrics_reads(fixture_text) -> None:
    """One MetricsParser over every payload in turn, twice (second time from memory), and damaged
    ones: each snapshot equals parse_metrics', malformed counts included."""
    parser = MetricsParser()
    busy = fixture_text("metrics_busy.txt")
    cut = busy.index("vllm:kv_cache_usage_perc{") + 30
    damaged = [
        busy[:cut],
        'vllm:num_requests_running{engine="0"} 3.0\nvllm:num_requests_running{engine="1"} x\n'
        '  vllm:num_requests_waiting 2\nvllm:num_requests_waiting{engine="1" 4.0',
        "",
    ]
    texts = [fixture_text(name) for name in PAYLOADS] + damaged
    for text in texts + texts:
        assert parser.parse(text) == parse_metrics(text)
    assert parser.parse(damaged[1]).malformed == 2


def test_a_payload_whose_vllm_lines_did_not_move_is_not_read_again(fixture_text) -> None:
    """Only the server's own process and HTTP counters moved (an idle server): the very same snapshot,
    from bytes or text; a moved vllm: line, or one added past the last, is read."""
    idle = fixture_text("metrics_idle.txt")

    def payload(n: int, tail: str = "") -> str:
        head = f"# HELP process_cpu_seconds_total x\nprocess_cpu_seconds_total {n}.5\n"
        return head + idle + f'http_requests_total{{handler="/metrics"}} {n}.0\n' + tail

    for from_bytes in (False, True):
        parser = MetricsParser()

        def parse(text: str, parser: MetricsParser = parser, from_bytes: bool = from_bytes) -> object:
            return parser.parse_bytes(text.encode()) if from_bytes else parser.parse(text)

        first = parse(payload(1))
        assert first == parse_metrics(idle)
        seen = len(parser._seen)
        assert parse(payload(2)) is first
        assert len(parser._seen) == seen  # no line looked up again (the moved ones least of all)
        moved = idle.replace("vllm:num_requests_running{", 'vllm:num_requests_running{x="1",', 1)
        assert parse(payload(3).replace(idle, moved)) == parse_metrics(moved)
        added = parse(payload(4, "vllm:num_requests_waiting 7.0\n"))
        assert (
            added.total("vllm:num_requests_waiting")
            == parse_metrics(idle).total("vllm:num_requests_waiting") + 7.0
        )
    parser = MetricsParser()
    for name in PAYLOADS + PAYLOADS:
        text = fixture_text(name)
        assert parser.parse_bytes(text.encode()) == parse_metrics(text)
    assert parser.parse_bytes(b"") == parse_metrics("")


def test_the_remembering_parser_forgets_beyond_its_bound() -> None:
    parser = MetricsParser(spare=1)
    for i in range(3000):  # a counter that changes every scrape: a new line each time
        snap = parser.parse(f"vllm:prompt_tokens_total {i}\nvllm:num_requests_running 1")
        assert snap.total("vllm:prompt_tokens_total") == i
    assert len(parser._seen) <= 1 * 2 + 1024 + 2


def test_busy_payload_keeps_the_families_vtui_reads(fixture_text) -> None:
    snap = parse_metrics(fixture_text("metrics_busy.txt"))
    assert snap.total("vllm:num_requests_running") == 8.0
    assert snap.total("vllm:num_requests_waiting") == 8.0
    assert "vllm:iteration_tokens_total_bucket" not in snap.series  # not needed, not kept
    assert snap.malformed == 0


def test_truncated_payload_yields_what_can_be_read(fixture_text) -> None:
    text = fixture_text("metrics_busy.txt")
    cut = text.index("vllm:kv_cache_usage_perc{") + 30  # mid-line
    snap = parse_metrics(text[:cut])
    assert snap.total("vllm:num_requests_running") == 8.0
    assert snap.total("vllm:kv_cache_usage_perc") is None
    assert snap.malformed == 1


def test_malformed_lines_are_skipped_not_fatal() -> None:
    text = "\n".join(
        [
            'vllm:num_requests_running{engine="0"} 3.0',
            'vllm:num_requests_running{engine="1"} not-a-number',
            "vllm:num_requests_waiting 2",
            'vllm:num_requests_waiting{engine="1" 4.0',  # no closing brace
            "garbage line",
            "",
            "vllm:prompt_tokens_total{} 10 1700000000000",  # with a timestamp
        ]
    )
    snap = parse_metrics(text)
    assert snap.total("vllm:num_requests_running") == 3.0
    assert snap.total("vllm:num_requests_waiting") == 2.0
    assert snap.total("vllm:prompt_tokens_total") == 10.0
    assert snap.malformed == 2


def test_labels_with_escapes_and_commas() -> None:
    raw = r'a="x,y",b="say \"hi\"",c="back\\slash",d="line\nbreak"'
    assert dict(parse_labels(raw)) == {"a": "x,y", "b": 'say "hi"', "c": "back\\slash", "d": "line\nbreak"}
    assert parse_labels("") == ()


def test_vllm_names_classification(fixture_text) -> None:
    assert parse_metrics(fixture_text("metrics_busy.txt")).vllm_names == "v1"
    assert parse_metrics(fixture_text("metrics_v0_0.6.txt")).vllm_names == "v0"
    assert parse_metrics(fixture_text("metrics_v1_0.10_dp2.txt")).vllm_names == "mixed"
    assert parse_metrics("").vllm_names is None


BOUNDS = (0.1, 0.5, 1.0, math.inf)


@pytest.mark.parametrize(
    ("q", "counts", "expected"),
    [
        (0.5, (10, 20, 20, 20), 0.1),  # rank 10 lands exactly at the top of bucket 0
        (0.25, (10, 20, 20, 20), 0.05),  # interpolate inside the first bucket from 0
        (0.75, (10, 20, 20, 20), 0.3),  # halfway through (0.1, 0.5]
        (0.99, (0, 0, 10, 20), 1.0),  # rank in +Inf: the largest finite bound
        (0.5, (0, 0, 0, 0), None),  # no observations
    ],
)
def test_histogram_quantile_like_prometheus(q, counts, expected) -> None:
    got = histogram_quantile(q, BOUNDS, tuple(float(c) for c in counts))
    assert got == pytest.approx(expected) if expected is not None else got is None


def test_histogram_without_inf_bucket_is_unusable() -> None:
    assert histogram_quantile(0.5, (0.1, 0.5), (1.0, 2.0)) is None
