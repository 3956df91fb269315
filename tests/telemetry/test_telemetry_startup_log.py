"""Startup facts for every vLLM generation (real 0.32 logs, hand-written 0.4-0.11 ones), with and
without process prefixes, and the live STARTING phase."""

from __future__ import annotations

import re

import pytest

from vtui.core.state import Phase
from vtui.telemetry.startup_log import FACT_KEYS, parse_startup

EXPECTED = {
    "startup.log": {
        "vllm_version": "0.32.0",
        "engine": "V1",
        "max_model_len": 512,
        "model_load_secs": 0.01,
        "available_kv_gib": 1.0,
        "kv_cache_tokens": 1_048_576,
        "max_concurrency": 2048.0,
        "max_concurrency_for_tokens": 512,
        "init_engine_secs": 3.59,
    },
    "startup_preempt_run.log": {
        "vllm_version": "0.32.0",
        "engine": "V1",
        "max_model_len": 512,
        "model_load_secs": 0.01,
        "available_kv_gib": 0.0,
        "kv_cache_tokens": 1024,
        "max_concurrency": 2.0,
        "max_concurrency_for_tokens": 512,
        "init_engine_secs": 0.01,
    },
    "logs/v0_0.4.2.log": {
        "vllm_version": "0.4.2",
        "engine": "V0",
        "max_model_len": 4096,
        "model_weights_gib": 12.5523,
        "gpu_memory_utilization": 0.9,
        "num_gpu_blocks": 3807,
        "num_cpu_blocks": 512,
        "kv_cache_tokens": 3807 * 16,
        "cuda_graph_capture_secs": 5.0,
    },
    "logs/v0_0.6.4.log": {
        "vllm_version": "0.6.4.post1",
        "engine": "V0",
        "max_model_len": 2048,
        "model_weights_gib": 0.9277,
        "total_gpu_gib": 7.92,
        "gpu_memory_utilization": 0.9,
        "non_torch_gib": 0.43,
        "activation_peak_gib": 1.38,
        "available_kv_gib": 4.39,
        "num_gpu_blocks": 23976,
        "num_cpu_blocks": 21845,
        "kv_cache_tokens": 23976 * 16,
        "max_concurrency": 187.31,
        "max_concurrency_for_tokens": 2048,
        "init_engine_secs": 19.74,
        "cuda_graph_capture_secs": 15.0,
    },
    "logs/v0_0.7.3_tp2.log": {
        "vllm_version": "0.7.3",
        "engine": "V0",
        "max_model_len": 16384,
        "model_weights_gib": 7.51,
        "total_gpu_gib": 79.1,
        "gpu_memory_utilization": 0.9,
        "non_torch_gib": 1.12,
        "activation_peak_gib": 1.4,
        "available_kv_gib": 61.16,
        "num_gpu_blocks": 62627,
        "num_cpu_blocks": 4096,
        "kv_cache_tokens": 62627 * 16,
        "max_concurrency": 61.16,
        "max_concurrency_for_tokens": 16384,
        "init_engine_secs": 20.1,
        "cuda_graph_capture_secs": 14.0,
    },
    "logs/v1_0.8.5.log": {
        "vllm_version": "0.8.5",
        "engine": "V1",
        "max_model_len": 32768,
        "model_weights_gib": 14.2487,
        "model_load_secs": 3.65217,
        "gpu_memory_utilization": 0.9,
        "kv_cache_tokens": 441_888,
        "max_concurrency": 13.49,
        "max_concurrency_for_tokens": 32768,
        "init_engine_secs": 61.12,
        "cuda_graph_capture_secs": 23.0,
        "torch_compile_secs": 26.45,
    },
    "logs/v1_0.10.1_tp2.log": {
        "vllm_version": "0.10.1.1",
        "engine": "V1",
        "max_model_len": 8192,
        "model_weights_gib": 7.6326,
        "model_load_secs": 4.250134,  # the last worker to finish
        "gpu_memory_utilization": 0.92,
        "available_kv_gib": 62.11,
        "kv_cache_tokens": 904_496,
        "max_concurrency": 110.41,
        "max_concurrency_for_tokens": 8192,
        "init_engine_secs": 63.41,
        "cuda_graph_capture_secs": 11.0,
        "torch_compile_secs": 28.02,
    },
    "logs/v1_0.10_kv_too_small.log": {
        "vllm_version": "0.10.1.1",
        "engine": "V1",
        "max_model_len": 131072,
        "model_weights_gib": 14.9889,
        "model_load_secs": 5.102,
        "gpu_memory_utilization": 0.5,
        "available_kv_gib": 8.77,
        "kv_needed_gib": 16.0,
        "estimated_max_model_len": 71824,
        "torch_compile_secs": 18.2,
    },
    "logs/v1_free_memory.log": {
        "vllm_version": "0.11.0",
        "engine": "V1",
        "max_model_len": 40960,
        "total_gpu_gib": 79.33,
        "gpu_memory_utilization": 0.95,
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_facts(name: str, fixture_text) -> None:
    facts = parse_startup(fixture_text(name).splitlines())
    assert facts.to_json() == EXPECTED[name]
    assert list(facts.to_json()) == [k for k in FACT_KEYS if k in EXPECTED[name]]  # JSON keys in order


def test_prefixes_make_no_difference(fixture_text) -> None:
    text = fixture_text("startup.log")
    bare = re.sub(r"^\([\w -]+ pid=\d+\) ", "", text, flags=re.M)
    assert bare != text
    with_prefix, without = parse_startup(text.splitlines()), parse_startup(bare.splitlines())
    assert without.to_json() == {**with_prefix.to_json(), "engine": "V1"}


def test_non_default_args_and_arg_lookup(fixture_text) -> None:
    facts = parse_startup(fixture_text("startup_preempt_run.log").splitlines())
    assert facts.non_default_args["served_model_name"] == ["tiny-c"]
    assert facts.arg("kv_cache_memory_bytes") == 1048576 and facts.arg("nope") is None
    v0 = parse_startup(fixture_text("logs/v0_0.4.2.log").splitlines())
    assert v0.non_default_args is None and v0.arg("port") == 8000 and v0.arg("allowed_origins") == ["*"]
    assert v0.model == "meta-llama/Llama-2-7b-chat-hf"


def test_non_literal_args_are_kept_as_text() -> None:
    facts = parse_startup(
        ["INFO non-default args: {'model': 'm', 'compilation_config': <Cfg at 0x1>, 'port': 9}"]
    )
    assert facts.arg("model") == "m" and facts.arg("port") == 9
    facts = parse_startup(
        [
            "INFO 12-06 api_server.py:586] args: Namespace(port=8000, dispatch_function="
            "<function serve at 0x7f>, max_model_len=None)"
        ]
    )
    assert facts.arg("port") == 8000 and facts.arg("max_model_len") is None


@pytest.mark.parametrize(
    ("name", "phases"),
    [
        ("startup.log", [Phase.SPAWNED, Phase.LOADING_WEIGHTS, Phase.KV_CACHE, Phase.API_UP]),
        (
            "logs/v0_0.4.2.log",
            [Phase.SPAWNED, Phase.LOADING_WEIGHTS, Phase.KV_CACHE, Phase.CAPTURING_GRAPHS, Phase.API_UP],
        ),
        (
            "logs/v1_0.10.1_tp2.log",
            [
                Phase.SPAWNED,
                Phase.LOADING_WEIGHTS,
                Phase.PROFILING,
                Phase.KV_CACHE,
                Phase.CAPTURING_GRAPHS,
                Phase.API_UP,
            ],
        ),
    ],
)
def test_live_phases_only_move_forward(name: str, phases: list[Phase], fixture_text) -> None:
    lines = fixture_text(name).splitlines()
    seen: list[Phase | None] = []
    for end in range(1, len(lines) + 1):  # the phase of the log so far, as it grows
        phase = parse_startup(lines[:end]).phase
        if not seen or seen[-1] is not phase:
            seen.append(phase)
    assert seen == phases


def test_an_appended_run_replaces_the_facts_of_the_last() -> None:
    first = [
        "INFO vLLM API server version 0.6.4",
        "INFO gpu_executor.py:113] # GPU blocks: 100, # CPU blocks: 5",
    ]
    assert parse_startup(first).num_gpu_blocks == 100
    facts = parse_startup([*first, 'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK', first[0]])
    assert facts.num_gpu_blocks is None and facts.vllm_version == "0.6.4"


def test_kv_budget_exact_from_args_else_the_logged_gib() -> None:
    given = "INFO non-default args: {'model': 'm', 'kv_cache_memory_bytes': 1048576}"
    rounded = "INFO [gpu_worker.py:276] Available KV cache memory: 62.11 GiB"
    cpu = "INFO [cpu_worker.py:260] Auto set (4.5/8.21) GiB for KV cache on node 0."
    exact = parse_startup([given, "INFO Explicitly set (0.0/9.34) GiB for KV cache on node 0."])
    assert (exact.kv_memory_bytes, exact.kv_memory_exact) == (1 << 20, True)
    assert (parse_startup([rounded]).kv_memory_bytes, parse_startup([rounded]).kv_memory_exact) == (
        round(62.11 * 2**30),
        False,
    )
    assert parse_startup([cpu]).kv_memory_bytes == round(4.5 * 2**30)
    assert parse_startup(["INFO nothing"]).kv_memory_bytes is None


def test_empty_log() -> None:
    facts = parse_startup([])
    assert facts.to_json() == {} and facts.phase is None


def test_phase_rank_is_the_one_startup_order() -> None:
    """Phase.rank (core.state) is the order the instance state machine and the log reader both use."""
    order = [Phase.SPAWNED, Phase.LOADING_WEIGHTS, Phase.PROFILING, Phase.KV_CACHE]
    order += [Phase.CAPTURING_GRAPHS, Phase.API_UP]
    assert [p.rank for p in order] == list(range(len(order))) and len(Phase) == len(order)
    assert Phase.KV_CACHE.advances(None) and Phase.KV_CACHE.advances(Phase.PROFILING)
    assert not Phase.PROFILING.advances(Phase.KV_CACHE) and not Phase.KV_CACHE.advances(Phase.KV_CACHE)
    # a late "Loading weights" line after the KV cache line does not move the phase back
    facts = parse_startup(["INFO GPU KV cache size: 1,024 tokens", "INFO Loading weights took 1.0 seconds"])
    assert facts.phase is Phase.KV_CACHE
