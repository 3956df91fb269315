"""MetricsWindow turns raw payloads into samples: gauges, counter rates with restart detection,
windowed percentiles, V0/V1 names, data-parallel engines; missing values stay None."""

from __future__ import annotations

import pytest

from vtui.telemetry.metrics import MetricsWindow, parse_metrics, sample_of


def _payload(
    prompt: float,
    gen: float,
    preempt: float = 0.0,
    ttft: tuple[float, float, float] = (0, 0, 0),
    stop: float = 0.0,
    abort: float = 0.0,
    error: float = 0.0,
    hits: float = 0.0,
    queries: float = 0.0,
) -> str:
    lab = 'engine="0",model_name="m"'
    b1, b2, inf = ttft
    return "\n".join(
        [
            f"vllm:num_requests_running{{{lab}}} 2.0",
            f"vllm:num_requests_waiting{{{lab}}} 1.0",
            f"vllm:kv_cache_usage_perc{{{lab}}} 0.5",
            f"vllm:prompt_tokens_total{{{lab}}} {prompt}",
            f"vllm:generation_tokens_total{{{lab}}} {gen}",
            f"vllm:num_preemptions_total{{{lab}}} {preempt}",
            f"vllm:prefix_cache_queries_total{{{lab}}} {queries}",
            f"vllm:prefix_cache_hits_total{{{lab}}} {hits}",
            f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m"}} {stop}',
            f'vllm:request_success_total{{engine="0",finished_reason="abort",model_name="m"}} {abort}',
            f'vllm:request_success_total{{engine="0",finished_reason="error",model_name="m"}} {error}',
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.1",model_name="m"}} {b1}',
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="1.0",model_name="m"}} {b2}',
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {inf}',
            f"vllm:time_to_first_token_seconds_count{{{lab}}} {inf}",
        ]
    )


def test_real_busy_payload(fixture_text) -> None:
    s = sample_of(fixture_text("metrics_busy.txt"), instance="a")
    assert (s.instance, s.running, s.waiting) == ("a", 8.0, 8.0)
    assert dict(s.waiting_by_reason) == {"capacity": 8.0, "deferred": 0.0}
    assert s.kv_usage == pytest.approx(0.0009766817238432424)
    assert (s.kv_capacity_tokens, s.block_size) == (1_048_576, 128)  # kv_cache_size_tokens label
    assert (s.prompt_tokens_total, s.generation_tokens_total) == (65.0, 426.0)
    assert (s.prefix_cache_queries_total, s.prefix_cache_hits_total, s.prefix_hit_rate) == (65.0, 0.0, 0.0)
    assert s.vllm_names == "v1" and s.engines == 1
    # one payload alone: no rates, percentiles over the server's lifetime
    assert s.prompt_tps is None and s.generation_tps is None and s.success_per_s is None
    assert 0.06 < s.ttft.p50 < 0.1  # 2 of 8 in (0.04, 0.06], 6 in (0.08, 0.1]
    assert s.e2e.p50 is None  # no request finished yet: None, not 0


def test_rates_between_scrapes() -> None:
    w = MetricsWindow()
    w.update(parse_metrics(_payload(100, 1000, stop=4, abort=1)), at=10.0)
    s = w.update(parse_metrics(_payload(300, 1500, preempt=3, stop=10, abort=2, error=1)), at=12.0)
    assert s.prompt_tps == pytest.approx(100.0)
    assert s.generation_tps == pytest.approx(250.0)
    assert s.preemptions_per_s == pytest.approx(1.5)
    assert (s.success_per_s, s.abort_per_s, s.error_per_s) == pytest.approx((3.0, 0.5, 0.5))
    assert not s.counter_reset


def test_counter_reset_is_reported_once_and_rates_restart() -> None:
    w = MetricsWindow()
    w.update(parse_metrics(_payload(5000, 9000)), at=0.0)
    s = w.update(parse_metrics(_payload(10, 20)), at=1.0)  # the server restarted
    assert s.counter_reset
    assert s.prompt_tps is None  # no valid base across a restart, rather than a negative rate
    s = w.update(parse_metrics(_payload(30, 60)), at=2.0)
    assert not s.counter_reset
    assert s.prompt_tps == pytest.approx(20.0)


def test_percentiles_come_from_bucket_deltas_over_the_window() -> None:
    w = MetricsWindow(window_s=10.0)
    # 100 old fast requests (all <= 0.1 s), before the window
    w.update(parse_metrics(_payload(0, 0, ttft=(100, 100, 100))), at=0.0)
    w.update(parse_metrics(_payload(0, 0, ttft=(100, 100, 100))), at=20.0)
    # then 10 slow ones (0.1..1 s): the window only sees these
    s = w.update(parse_metrics(_payload(0, 0, ttft=(100, 110, 110))), at=25.0)
    assert s.ttft.p50 == pytest.approx(0.1 + 0.9 * 0.5)
    assert s.ttft.p99 == pytest.approx(0.1 + 0.9 * 0.99)
    # nothing new finished within the last 10 s: None, not the lifetime figures
    w.update(parse_metrics(_payload(0, 0, ttft=(100, 110, 110))), at=40.0)
    s = w.update(parse_metrics(_payload(0, 0, ttft=(100, 110, 110))), at=41.0)
    assert s.ttft.p50 is None


def test_prefix_hit_rate_is_windowed() -> None:
    w = MetricsWindow()
    w.update(parse_metrics(_payload(0, 0, hits=0, queries=1000)), at=0.0)
    s = w.update(parse_metrics(_payload(0, 0, hits=300, queries=1400)), at=1.0)
    assert s.prefix_hit_rate == pytest.approx(0.75)


def test_v0_payload(fixture_text) -> None:
    s = sample_of(fixture_text("metrics_v0_0.6.txt"))
    assert s.vllm_names == "v0"
    assert (s.running, s.waiting, s.kv_usage) == (12.0, 3.0, 0.4375)  # gpu_cache_usage_perc
    assert (s.kv_capacity_tokens, s.block_size) == (27912 * 16, 16)  # blocks x block size
    assert s.prefix_hit_rate == 0.25  # V0's gauge
    assert s.prefix_cache_queries_total is None
    assert s.itl.p50 is not None  # time_per_output_token_seconds
    assert s.queue.p95 is not None
    assert dict(s.waiting_by_reason) == {}


def test_v0_has_no_abort_reason_so_abort_rate_is_none(fixture_text) -> None:
    w = MetricsWindow()
    text = fixture_text("metrics_v0_0.6.txt")
    w.update(parse_metrics(text), at=0.0)
    s = w.update(
        parse_metrics(
            text.replace(
                'finished_reason="stop",model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 150.0',
                'finished_reason="stop",model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 160.0',
            )
        ),
        at=2.0,
    )
    assert s.success_per_s == pytest.approx(5.0)
    assert s.abort_per_s is None and s.error_per_s is None


def test_data_parallel_engines_are_summed_and_new_names_win(fixture_text) -> None:
    s = sample_of(fixture_text("metrics_v1_0.10_dp2.txt"))
    assert s.vllm_names == "mixed" and s.engines == 2
    assert (s.running, s.waiting) == (16.0, 2.0)
    assert s.kv_usage == pytest.approx(0.375)  # a fraction: averaged over engines, not summed
    assert s.kv_capacity_tokens == 2 * 29721 * 16
    assert (s.prefix_cache_queries_total, s.prefix_cache_hits_total) == (4000.0, 1000.0)
    assert s.prompt_tokens_total == 10000.0
    assert s.ttft.p50 is not None


def test_empty_payload_is_all_none() -> None:
    s = sample_of("")
    for name in (
        "running",
        "waiting",
        "kv_usage",
        "kv_capacity_tokens",
        "prompt_tokens_total",
        "preemptions_total",
        "prefix_hit_rate",
        "vllm_names",
        "engines",
    ):
        assert getattr(s, name) is None, name
    assert s.ttft.p50 is None


def test_preemption_fixtures(fixture_text) -> None:
    w = MetricsWindow()
    w.update(parse_metrics(fixture_text("metrics_preempt_before.txt")), at=0.0)
    s = w.update(parse_metrics(fixture_text("metrics_preempt_busy.txt")), at=7.0)
    assert s.kv_usage == 1.0 and s.waiting == 7.0
    assert s.preemptions_per_s == pytest.approx(1.0)
    assert s.kv_capacity_tokens == 1024


def test_one_histogram_table_feeds_the_reader_and_the_sample() -> None:
    """promtext.HISTOGRAM_ROLES is the only table of histogram names: the reader keeps exactly its names
    and every role is a percentile field of MetricsSample, read from either name of a rename."""
    from dataclasses import fields

    from vtui.telemetry.metrics import MetricsSample, Percentiles
    from vtui.telemetry.promtext import HISTOGRAM_ROLES, HISTOGRAMS, WANTED

    assert set(HISTOGRAMS) == {n for names in HISTOGRAM_ROLES.values() for n in names}
    assert all(f"{name}_bucket" in WANTED and f"{name}_sum" in WANTED for name in HISTOGRAMS)
    percentile_fields = {f.name for f in fields(MetricsSample) if f.type in ("Percentiles", Percentiles)}
    assert set(HISTOGRAM_ROLES) == percentile_fields
    for role, names in HISTOGRAM_ROLES.items():
        for name in names:
            text = "\n".join(
                [f'{name}_bucket{{le="0.1"}} {n}' for n in (0,)]
                + [f'{name}_bucket{{le="+Inf"}} 0', f"{name}_count 0", f"{name}_sum 0"]
            )
            later = "\n".join(
                [f'{name}_bucket{{le="0.1"}} 4', f'{name}_bucket{{le="+Inf"}} 4', f"{name}_count 4"]
                + [f"{name}_sum 0.2"]
            )
            window = MetricsWindow()
            window.update(parse_metrics(text), at=0.0)
            sample = window.update(parse_metrics(later), at=1.0)
            assert getattr(sample, role).p50 is not None, (role, name)


@pytest.mark.parametrize(
    ("queries_name", "hits_name"),
    [
        ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"),
        ("vllm:gpu_prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
    ],
)
def test_prefix_pair_mid_rename_still_gives_the_hit_rate(queries_name: str, hits_name: str) -> None:
    """A 0.10 payload mid-rename: one half of the pair under its new name, the other under its old one."""

    def payload(queries: int, hits: int) -> str:
        return "\n".join(
            [
                f"# TYPE {queries_name} counter",
                f'{queries_name}{{engine="0",model_name="m"}} {queries}.0',
                f"# TYPE {hits_name} counter",
                f'{hits_name}{{engine="0",model_name="m"}} {hits}.0',
                "",
            ]
        )

    s = sample_of(payload(800, 200))
    assert (s.prefix_cache_queries_total, s.prefix_cache_hits_total) == (800.0, 200.0)
    assert s.prefix_hit_rate == pytest.approx(0.25)
    w = MetricsWindow()
    w.update(parse_metrics(payload(800, 200)), at=0.0)
    assert w.update(parse_metrics(payload(1000, 350)), at=1.0).prefix_hit_rate == pytest.approx(0.75)


def test_data_parallel_engines_are_shown_per_rank(fixture_text) -> None:
    from vtui.telemetry.metrics import MetricsWindow, RankSample, parse_metrics

    text = fixture_text("metrics_v1_0.10_dp2.txt")
    s = sample_of(text)
    assert s.ranks == (RankSample("0", 10.0, 2.0, 0.5, None), RankSample("1", 6.0, 0.0, 0.25, None))
    assert sum(r.running for r in s.ranks) == s.running  # the total is the ranks' sum
    # a later scrape: rank 1 generated 500 tokens in 5 s, rank 0 none
    later = text.replace(
        'vllm:generation_tokens_total{engine="1",model_name="Qwen/Qwen3-8B"} 20000.0',
        'vllm:generation_tokens_total{engine="1",model_name="Qwen/Qwen3-8B"} 20500.0',
    )
    window = MetricsWindow()
    window.update(parse_metrics(text), 10.0)
    second = window.update(parse_metrics(later), 15.0)
    assert [r.generation_tps for r in second.ranks] == [0.0, pytest.approx(100.0)]
    assert second.generation_tps == pytest.approx(100.0)


def test_one_engine_has_no_rank_breakdown(fixture_text) -> None:
    assert sample_of(fixture_text("metrics_busy.txt")).ranks == ()


def test_a_vllm_router_payload_gives_what_it_routed(fixture_text) -> None:
    """vllm-router 0.1.17's own Prometheus port, captured: right after start (gauges only, its counters
    appear with the first request, error or retry they count) and after 16 requests, one answered with
    an error, one retried (a replica killed). Totals from the payload, rates over the window, per worker."""
    fresh = fixture_text("metrics_router_0.1.17_fresh.txt")
    later = fixture_text("metrics_router_0.1.17.txt")
    window = MetricsWindow(window_s=60.0)
    first = window.update(parse_metrics(fresh), 100.0, "chat-router")
    assert dict(first.router) == {
        "requests_total": 0,
        "errors_total": 0,
        "retries_total": 0,
        "active_workers": 2,
    }
    assert not first.routed  # no window yet
    assert first.running is None and first.generation_tps is None  # none of vLLM's own
    second = window.update(parse_metrics(later), 110.0, "chat-router")
    assert dict(second.router) == pytest.approx(
        {
            "requests_total": 16,
            "errors_total": 1,
            "retries_total": 1,
            "active_workers": 2,
            "requests_per_s": 1.6,
            "errors_per_s": 0.1,
            "retries_per_s": 0.1,
        }
    )
    assert dict(second.routed) == pytest.approx(
        {"http://127.0.0.1:18200": 0.5, "http://127.0.0.1:18201": 1.3}
    )
    # the router restarted: its counters went down, the window starts again
    third = window.update(parse_metrics(fresh), 120.0, "chat-router")
    assert third.counter_reset and "requests_per_s" not in third.router and not third.routed
    assert not sample_of(fixture_text("metrics_busy.txt")).router  # a vLLM payload has none of them


def test_a_steady_server_gets_the_samples_a_fresh_reading_gives(fixture_text, monkeypatch) -> None:
    """A window fed by a MetricsParser (which hands back one snapshot while the vllm: lines repeat, and
    the window then restamps its last steady sample) gives exactly the samples of a window fed a fresh
    parse each time, through busy runs, idle runs, a restart and a data-parallel payload; the idle runs
    are not computed again, even while older points of another snapshot are still in the window."""
    from vtui.telemetry.promtext import MetricsParser

    busy = [
        _payload(10, 20, ttft=(1, 2, 3), stop=1),
        _payload(30, 90, ttft=(2, 4, 6), stop=3, hits=1, queries=4),
    ]
    idle, dp = busy[1], fixture_text("metrics_v1_0.10_dp2.txt")
    run = [busy[0], *[idle] * 9, _payload(1, 2), _payload(1, 2), _payload(1, 2), dp, dp, dp, idle]
    computed: list[int] = []
    original = MetricsWindow._sample
    monkeypatch.setattr(MetricsWindow, "_sample", lambda self, *a: computed.append(1) or original(self, *a))
    shared, fresh, parser = MetricsWindow(window_s=3.5), MetricsWindow(window_s=3.5), MetricsParser()
    restamped = []
    for i, text in enumerate(run):
        before = len(computed)
        got = shared.update(parser.parse(text), 100.0 + i, "a")
        if len(computed) == before:
            restamped.append(i)
        assert got == fresh.update(parse_metrics(text), 100.0 + i, "a"), i
        assert got.at == 100.0 + i
    # steady once the previous point is the same snapshot's; restamped while the window's first point
    # stays the same snapshot's too: 2 computed (first point busy[0]), 3 restamped, 4 computed (first
    # point now idle's), 5-9 restamped; the restart at 10 empties the window: 11 computed, 12 restamped;
    # 14 computed (first point 11), 15 restamped (first point 12: the same snapshot's as 11)
    assert restamped == [3, 5, 6, 7, 8, 9, 12, 15]
