"""Startup-log formats from vLLM 0.29 to 0.34, each in its own fixture (fixtures/logs/): the real 0.32
`--max-model-len auto` run stopped by SIGTERM with a stream open, and hand-written lines in vLLM's own
wording (its format strings in v1/worker, v1/core/kv_cache_utils.py, entrypoints) for what a CPU build
cannot print."""

from __future__ import annotations

import pytest

from vtui.commands.diagnose import render
from vtui.core.state import Phase
from vtui.telemetry.diagnosis import diagnose, not_worth_retrying
from vtui.telemetry.facts import memory_text
from vtui.telemetry.startup_log import parse_startup


def _no_holders(port: int) -> list[tuple[int, str]]:
    return []


def _lines(fixture_text, name: str) -> list[str]:
    return fixture_text(f"logs/{name}").splitlines()


def test_auto_fit_max_model_len_replaces_the_derived_one(fixture_text) -> None:
    facts = parse_startup(_lines(fixture_text, "v1_0.32_auto_fit_sigterm.log"))
    # "Using max model len 2048", then "Auto-fit max_model_len: reduced from 2048 to 1408"
    assert facts.max_model_len == 1408
    assert facts.max_concurrency_for_tokens == 1408
    assert facts.kv_cache_tokens == 1536  # "CPU KV cache size: 1,536 tokens"
    assert facts.vllm_version == "0.32.0"  # the ASCII-art banner


def test_auto_fit_when_the_full_context_fits() -> None:
    facts = parse_startup(
        [
            "(APIServer pid=1) INFO 12-04 18:16:56 [model.py:2152] Using max model len 40960",
            "(EngineCore pid=2) INFO 12-04 18:17:18 [kv_cache_utils.py:2468] Auto-fit max_model_len: full model "
            "context length 40960 fits in available KV cache memory (52.4 GiB GPU)",
        ]
    )
    assert facts.max_model_len == 40960


def test_a_teardown_traceback_after_ready_is_no_startup_failure(fixture_text) -> None:
    lines = _lines(fixture_text, "v1_0.32_auto_fit_sigterm.log")
    assert any("EngineDeadError" in line for line in lines)
    assert diagnose(lines, holders_of_port=_no_holders) == []
    # the same traceback before the server was up is one
    before_ready = [line for line in lines if "Application startup complete" not in line]
    before_ready = [
        line for line in before_ready if "Starting vLLM" not in line and "Uvicorn running" not in line
    ]
    kinds = [p.kind for p in diagnose(before_ready, holders_of_port=_no_holders)]
    assert kinds == ["startup_failed"]


def test_a_new_run_after_a_ready_one_counts_its_failures_again(fixture_text) -> None:
    ready = _lines(fixture_text, "v1_0.32_auto_fit_sigterm.log")
    failed = [
        "(EngineCore pid=9) INFO 12-04 18:20:00 [default_loader.py:501] Loading weights took 0.01 seconds",
        "(EngineCore pid=9) ERROR 12-04 18:20:01 [core.py:1510] EngineCore failed to start.",
        "(EngineCore pid=9) ERROR 12-04 18:20:01 [core.py:1510] Traceback (most recent call last):",
        "(EngineCore pid=9) ERROR 12-04 18:20:01 [core.py:1510] KeyError: 'model.layers.0.mlp'",
    ]
    assert [p.kind for p in diagnose(ready + failed, holders_of_port=_no_holders)] == ["startup_failed"]


def test_data_parallel_api_servers_and_the_extensible_kv_cache(fixture_text) -> None:
    facts = parse_startup(_lines(fixture_text, "v1_0.34_dp_extended_kv.log"))
    assert facts.vllm_version == "0.34.0"
    assert facts.engine == "V1"
    assert facts.model_load_secs == pytest.approx(10.204311)
    # the cache grown after warmup replaces the first reservation's size and what followed from it
    assert facts.num_gpu_blocks == 24448
    assert facts.available_kv_gib == pytest.approx(
        53.71
    )  # also "Current kv cache memory in use is 53.71 GiB"
    assert facts.kv_cache_tokens != 381_568 and facts.max_concurrency is None
    # the V2 model runner logs a capture while profiling, then the real one: the real one, not the sum
    assert facts.cuda_graph_capture_secs == 6.0
    assert facts.phase is Phase.API_UP


def test_an_api_server_prefix_alone_says_v1() -> None:
    assert parse_startup(["(ApiServer_2 pid=3103) INFO 03-02 10:00:02 [api_utils.py:286] x"]).engine == "V1"


def test_current_kv_cache_memory_in_use() -> None:
    line = (
        "(EngineCore pid=5) INFO 11-02 10:00:00 [gpu_worker.py:440] Free memory on device cuda:0 (23.3/23.55 GiB) "
        "on startup. Desired GPU memory utilization is (0.9, 21.2 GiB). Actual usage is 4.6 GiB for weight, "
        "1.2 GiB for peak activation, 0.09 GiB for non-torch memory, and 0.3 GiB for CUDAGraph memory. Replace "
        "gpu_memory_utilization config with `--kv-cache-memory=16171233894` (15.06 GiB) to fit into requested "
        "memory, or `--kv-cache-memory=18452135014` (17.18 GiB) to fully utilize gpu memory. Current kv cache "
        "memory in use is 15.02 GiB."
    )
    assert parse_startup([line]).available_kv_gib == pytest.approx(15.02)


def test_compose_prefixes_and_an_explicit_kv_budget(fixture_text) -> None:
    facts = parse_startup(_lines(fixture_text, "v1_compose_stage_prefixes.log"))
    assert facts.to_json() == {
        "vllm_version": "0.31.0",
        "engine": "V1",
        "max_model_len": 32768,
        "model_weights_gib": 7.6,
        "model_load_secs": 21.5042,
        "available_kv_gib": 20.0,  # "Initial free memory 78.5 GiB, reserved 20.0 GiB ..."
        "kv_cache_tokens": 145_632,
        "max_concurrency": 4.44,
        "max_concurrency_for_tokens": 32768,
        "init_engine_secs": 19.87,
        "cuda_graph_capture_secs": 8.0,
    }


def test_stage_prefix(fixture_text) -> None:
    facts = parse_startup(_lines(fixture_text, "v1_omni_stage_prefix.log"))
    assert (facts.vllm_version, facts.max_model_len, facts.available_kv_gib) == ("0.29.0", 8192, 48.35)
    assert (facts.kv_cache_tokens, facts.max_concurrency_for_tokens) == (905_424, 8192)
    assert facts.model_load_secs == pytest.approx(12.250611)


def test_thousands_separator_in_maximum_concurrency() -> None:
    facts = parse_startup(
        [
            "INFO 06-01 10:00:00 [kv_cache_utils.py:716] Maximum concurrency for 124,000 tokens per request: 1.15x"
        ]
    )
    assert (facts.max_concurrency_for_tokens, facts.max_concurrency) == (124_000, 1.15)


def test_negative_v0_kv_budget(fixture_text) -> None:
    lines = _lines(fixture_text, "v0_0.7_negative_kv.log")
    facts = parse_startup(lines)
    assert facts.available_kv_gib == pytest.approx(-1.05)
    assert facts.engine == "V0" and facts.num_gpu_blocks == 0
    assert [p.kind for p in diagnose(lines, facts)] == ["no_kv_memory"]


def test_port_in_use_from_uvicorns_bind_error(fixture_text) -> None:
    (problem,) = diagnose(_lines(fixture_text, "port_in_use_uvicorn_bind.log"), holders_of_port=_no_holders)
    assert problem.kind == "port_in_use" and "port 8011" in problem.message


def test_free_memory_wrapped_in_a_worker_error(fixture_text) -> None:
    problems = diagnose(_lines(fixture_text, "rocm_free_memory_wrapped.log"), holders_of_port=_no_holders)
    assert [p.kind for p in problems] == ["free_memory_below_utilization"]
    assert "11.23 GiB of 191.98 GiB is free on GPU cuda:0" in problems[0].explanation


@pytest.mark.parametrize(
    ("gib", "text"),
    [(14.9888, "14.99 GiB"), (1.0, "1 GiB"), (0.5, "512 MiB"), (0.05, "51.2 MiB"), (0.0, "< 5 MiB")],
)
def test_memory_text(gib: float, text: str) -> None:
    assert memory_text(gib) == text


def test_small_kv_figures_are_not_zero_gib() -> None:
    line = (
        "(EngineCore pid=7) ERROR 12-04 18:30:00 [core.py:1510] ValueError: To serve at least one request with "
        "the model's max seq len (2048), (0.03 GiB KV cache is needed, which is larger than the available KV "
        "cache memory (0.0 GiB). Based on the available memory, the estimated maximum model length is 96. Try "
        "increasing `gpu_memory_utilization`"
    )
    (problem,) = diagnose([line])
    assert "0 GiB" not in problem.explanation
    assert "needs 30.7 MiB of KV cache, but only < 5 MiB is left" in problem.explanation


def test_diagnose_shows_the_exact_kv_budget_in_mib(fixture_text) -> None:
    lines = _lines(fixture_text, "v1_0.32_auto_fit_sigterm.log")  # --kv-cache-memory-bytes 1700000
    text = render(parse_startup(lines), [])
    assert f"KV cache memory              {1700000 / 2**20:.3g} MiB" in text
    assert "0.0" not in text.split("KV cache memory")[1].splitlines()[0]


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
            "no_kv_memory",
        ),
        ("vllm serve: error: unrecognized arguments: --max-num-sqes 8", "unknown_flag"),
        (
            "ValueError: User-specified max_model_len (40960) is greater than the derived max_model_len "
            "(max_position_embeddings=2048 or model_max_length=None in model's config.json).",
            "max_model_len_above_model",
        ),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "cuda_oom"),
    ],
)
def test_failures_the_same_flags_meet_again_are_not_retried(line: str, kind: str) -> None:
    problem = not_worth_retrying(["INFO starting", line])
    assert problem is not None and problem.kind == kind


def test_a_taken_port_or_an_unknown_cause_is_worth_a_retry() -> None:
    assert not_worth_retrying(["OSError: [Errno 98] Address already in use"]) is None
    assert not_worth_retrying(["Traceback (most recent call last):", "RuntimeError: something else"]) is None
