"""The load generator against a local fake server: modes, ramp stops, errors counted, server metrics
read beside each step, results files complete, baselines compared."""

from __future__ import annotations

import csv
import json

from vtui.bench import (
    BenchConfig,
    compare,
    cost_per_million_output_tokens,
    make_baseline,
    run_bench,
    write_results,
)
from vtui.bench.results import CSV_COLUMNS


async def test_fixed_concurrency_counts_and_tokens(fake_server):
    server = await fake_server(slots=2, token_delay=0.01)  # ~0.1 s per request: the scrapes see it busy
    progress = []
    result = await run_bench(
        BenchConfig(
            server.base_url,
            concurrency=4,
            num_requests=12,
            input_len=10,
            output_len=10,
            scrape_interval_s=0.02,
        ),
        progress.append,
    )
    (step,) = result.steps
    assert (step.requests, step.completed, step.failed, step.concurrency) == (12, 12, 0, 4)
    assert server.peak_in_flight == 4  # exactly N requests in flight, never more
    assert step.output_tok_per_s > 0 and step.req_per_s > 0
    assert round(step.total_tok_per_s / step.output_tok_per_s, 9) == 2  # 10 prompt + 10 output tokens each
    assert step.ttft.p50 is not None and step.itl.p50 is not None and step.e2e.p99 is not None
    assert result.model == "fake" and result.server_version == "fake-1"
    # The server's view of the same step: 4 in flight with 2 slots → 2 waiting, KV 4/8.
    assert step.server.running_peak == 2 and step.server.waiting_peak == 2
    assert step.server.kv_usage_peak == 0.5 and step.server.requests == 12
    assert 0 < step.server.load_scrapes < step.server.scrapes  # the baseline and final ones apart
    assert step.server.ttft.mean is not None
    assert progress[0].phase == "step-start" and progress[-1].phase == "done"
    assert any(p.phase == "step-done" and p.step is step for p in progress)


async def test_peaks_are_unknown_when_no_scrape_answered_during_the_load(fake_server, monkeypatch):
    # The step ends long before the first in-load scrape (30 s): only the idle baseline and the final
    # scrape answered. Their 0s are not the step's peaks; the counters' deltas still are.
    from vtui.bench import server as server_mod

    monkeypatch.setattr(server_mod, "FIRST_LOAD_SCRAPE_S", 30.0)
    server = await fake_server(slots=2, token_delay=0.001)
    result = await run_bench(
        BenchConfig(server.base_url, concurrency=4, num_requests=8, output_len=4, scrape_interval_s=30.0)
    )
    (step,) = result.steps
    assert step.completed == 8
    assert step.server.scrapes >= 4 and step.server.load_scrapes == 0
    assert (step.server.kv_usage_peak, step.server.waiting_peak, step.server.running_peak) == (
        None,
        None,
        None,
    )
    assert step.server.requests == 8  # the TTFT histogram's delta: baseline to final scrape


async def test_ramp_stops_when_errors_break_the_limit(fake_server):
    server = await fake_server(fail_above=3)  # the 4th concurrent request is refused
    result = await run_bench(
        BenchConfig(
            server.base_url,
            mode="ramp",
            concurrency=16,
            num_requests=16,
            output_len=4,
            max_error_rate=0.05,
            scrape_interval_s=0.05,
        )
    )
    assert [s.concurrency for s in result.steps] == [1, 2, 4]  # 8 and 16 never ran
    last = result.steps[-1]
    assert last.failed > 0 and last.completed + last.failed == 16
    assert last.errors[0][0].startswith("HTTP 503: server busy")
    assert last.breaks and "error rate" in last.breaks and "c=4" in result.stop_reason
    assert last.server.preemptions == last.failed  # the fake counts each refusal as a preemption


async def test_ramp_stops_at_ttft_target(fake_server):
    # TTFT = 20 ms × requests in flight: 20 ms at c=1, 40 ms at c=2, 80 ms at c=4 > 60 ms target.
    server = await fake_server(ttft_per_inflight=0.02, token_delay=0.0)
    result = await run_bench(
        BenchConfig(
            server.base_url,
            mode="ramp",
            concurrency=8,
            num_requests=8,
            output_len=2,
            ttft_target_s=0.06,
            ttft_percentile="p50",
            scrape_metrics=False,
        )
    )
    assert [s.concurrency for s in result.steps] == [1, 2, 4]
    assert "TTFT p50" in result.steps[-1].breaks and result.steps[-1].ttft.p50 > 0.06
    assert result.steps[0].server.scrapes == 0


async def test_connections_are_kept_alive(fake_server):
    # Reading each stream to its end keeps the connection for the next request: 2 workers, 2 connections
    # (the /v1/models and /version lookups reuse one of them), however many requests.
    server = await fake_server(token_delay=0.0)
    await run_bench(
        BenchConfig(server.base_url, concurrency=2, num_requests=20, output_len=3, scrape_metrics=False)
    )
    assert server.connections == 2


async def test_rate_mode_is_seeded_poisson(fake_server):
    server = await fake_server(token_delay=0.0)
    config = BenchConfig(
        server.base_url,
        mode="rate",
        request_rate=200.0,
        num_requests=20,
        output_len=2,
        concurrency=0,
        scrape_metrics=False,
        seed=7,
    )
    first = await run_bench(config)
    (step,) = first.steps
    assert step.request_rate == 200.0 and step.concurrency is None and step.completed == 20
    assert step.label == "rate=200"


async def test_results_files_complete(fake_server, tmp_path):
    server = await fake_server(token_delay=0.02)  # each step outlasts the first in-load scrape: peaks seen
    result = await run_bench(
        BenchConfig(
            server.base_url, mode="ramp", concurrency=2, num_requests=4, output_len=3, scrape_interval_s=0.02
        )
    )
    json_path, csv_path = write_results(result, tmp_path, "run")
    data = json.loads(json_path.read_text())
    assert data["kind"] == "vtui-bench" and len(data["steps"]) == 2
    assert data["steps"][1]["ttft"]["p95"] is not None and data["steps"][1]["server"]["requests"] == 4
    assert "api_key" not in data["config"]
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["concurrency"] for r in rows] == ["1", "2"]
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    assert all(
        rows[1][k] != ""
        for k in ("req_per_s", "ttft_p99", "itl_p50", "e2e_p95", "server_kv_usage_peak", "server_ttft_mean")
    )


async def test_jsonl_prompts_and_unreachable_server(fake_server, tmp_path):
    server = await fake_server()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('"hello"\n{"prompt": "two", "max_tokens": 3}\n')
    result = await run_bench(
        BenchConfig(
            server.base_url,
            num_requests=4,
            concurrency=2,
            prompts_file=prompts,
            output_len=5,
            scrape_metrics=False,
        )
    )
    step = result.steps[0]
    assert step.completed == 4
    # Alternating prompts: 5 and 3 output tokens.
    assert round(step.output_tok_per_s * step.duration_s, 6) == 16
    down = await run_bench(
        BenchConfig(
            "http://127.0.0.1:9", model="m", num_requests=3, concurrency=1, scrape_metrics=False, timeout_s=2
        )
    )
    assert down.steps[0].failed == 3 and down.steps[0].error_rate == 1.0


def test_baseline_compare_and_cost():
    def step(label: str, rps: float, ttft: float) -> dict:
        return {
            "label": label,
            "req_per_s": rps,
            "output_tok_per_s": rps * 100,
            "total_tok_per_s": rps * 200,
            "ttft": {"p50": ttft, "p95": ttft},
            "itl": {"p50": 0.01, "p95": 0.02},
            "e2e": {"p50": 1.0, "p95": 2.0},
            "error_rate": 0.0,
        }

    base = {"kind": "vtui-baseline", "bench": {"steps": [step("c=4", 10.0, 0.100)]}}
    current = {"kind": "vtui-bench", "steps": [step("c=4", 9.0, 0.104), step("c=8", 5.0, 1.0)]}
    changes = {c.metric: c for c in compare(current, base, threshold=0.05)}
    assert changes["req_per_s"].regression and round(changes["req_per_s"].change, 3) == -0.1
    assert not changes["ttft.p50"].regression  # +4 % is inside 5 %
    assert all(c.step == "c=4" for c in changes.values())  # c=8 has no baseline step
    # $2/GPU-hour, 2 GPUs, 1,000 tok/s → 3.6 M tokens/hour → $4 / 3.6 = $1.111 per million.
    assert round(cost_per_million_output_tokens(2.0, 2, 1000.0), 3) == 1.111


async def test_make_baseline_records_flags_and_revision(fake_server):
    server = await fake_server()
    result = await run_bench(
        BenchConfig(server.base_url, num_requests=2, concurrency=1, output_len=2, scrape_metrics=False)
    )
    b = make_baseline(
        result,
        flags={"max-num-seqs": 8},
        model="/hub/models--a--b/snapshots/0123abcd",
        gpu_hour_price=1.0,
        gpus=1,
    )
    assert b["vllm_version"] == "fake-1" and b["flags"] == {"max-num-seqs": 8}
    assert b["model_revision"] == "0123abcd" and b["cost_per_million_output_tokens"][0] > 0
