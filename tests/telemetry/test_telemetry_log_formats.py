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


# -- formats found growing the public corpus (tests/telemetry/corpus/logs/, issue 27) ------------------------


def test_systemd_journal_prefix_starts_a_record() -> None:
    """`journalctl -u vllm` puts "Aug 18 22:22:22 host unit[pid]: " before every record: each line is a record of
    its own (not the wrapped rest of the one before), and the facts behind the prefix read as without it."""
    from vtui.telemetry.startup_log import continues

    first = (
        "Aug 18 22:22:05 sys0 vllm[188633]: (EngineCore pid=188633) INFO 08-18 22:22:05 [core.py:121] "
        "Initializing a V1 LLM engine (v0.27.1) with config: model='/m', max_seq_len=8192, download_dir=None"
    )
    loaded = (
        "Aug 18 22:22:22 sys0 vllm[188957]: (Worker_TP0 pid=188957) INFO 08-18 22:22:22 "
        "[gpu_model_runner.py:5405] Model loading took 37.96 GiB memory and 8.116200 seconds"
    )
    assert not continues(first, loaded)
    assert continues(first, "  , tokenizer='/m'")  # a wrapped config line still joins
    facts = parse_startup([first, "Aug 18 22:22:14 sys0 vllm[188957]: [102B blob data]", loaded])
    assert (facts.vllm_version, facts.engine, facts.max_model_len) == ("0.27.1", "V1", 8192)
    assert (facts.model_weights_gib, facts.model_load_secs) == (37.96, pytest.approx(8.1162))


@pytest.mark.parametrize(
    "colour",
    [
        lambda s, code: f"\x1b[{code}m{s}\x1b[0m",  # a terminal's log, as written
        lambda s, code: f"^[[{code}m{s}^[[0m",  # a CI page's caret form
    ],
)
def test_colour_codes_are_read_through(colour) -> None:
    """vLLM colours its prefix, level and time on a terminal: the failure read from such a log is the record's
    text, without the codes (and without the prefix they hid from the level/date pattern)."""

    def record(text: str) -> str:
        return " ".join(
            [
                colour("(EngineCore_DP0 pid=738)", "0;36"),
                colour("ERROR", "31"),
                colour("01-26 09:25:37", "90"),
            ]
            + [colour("[core.py:935]", "90"), text]
        )

    lines = [record("EngineCore failed to start."), record("Traceback (most recent call last):")]
    (problem,) = diagnose(lines, holders_of_port=_no_holders)
    assert problem.kind == "startup_failed"
    assert "\x1b" not in problem.message and "^[" not in problem.message
    assert problem.message.endswith("EngineCore failed to start.")
    kv = (
        colour("(EngineCore pid=4)", "0;36")
        + " INFO 01-26 09:25:40 [kv_cache_utils.py:1710] GPU KV cache size: 1,024 tokens"
    )
    assert (parse_startup([kv]).engine, parse_startup([kv]).kv_cache_tokens) == ("V1", 1024)


def test_a_v1_kv_error_cut_after_the_need_still_names_the_length() -> None:
    """A paste that ends the 0.2x error at "is needed, which is larger t" keeps the length and the need; the
    fix needs the available memory and vLLM's estimate, which were cut away."""
    lines = [
        "  ValueError: To serve at least one request with the model's max seq len (1048576),",
        "  23.32 GiB KV cache is needed, which is larger t",
    ]
    facts = parse_startup(lines)
    assert (facts.max_model_len, facts.kv_needed_gib, facts.available_kv_gib) == (1048576, 23.32, None)
    (problem,) = diagnose(lines, holders_of_port=_no_holders)
    assert problem.kind == "kv_too_small_for_max_model_len" and problem.fix is None
    assert "1048576" in problem.explanation and "23.32 GiB" in problem.explanation


def test_a_v1_kv_error_wrapped_mid_sentence_is_reported_once_whole() -> None:
    """Read line by line, the first half of a wrapped error looks like a cut one; the whole message, once the
    next line joins it, replaces it (with vLLM's estimate as the fix)."""
    lines = [
        "(EngineCore pid=1) ERROR 08-21 18:37:44 [core.py:1344] ValueError: To serve at least one request with the "
        "model's max seq len (100000), (4.26 GiB KV cache is needed, which is larger than the available KV cach",
        "e memory (4.25 GiB). Based on the available memory, the estimated maximum model length is 99632. Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
    ]
    (problem,) = diagnose(lines, holders_of_port=_no_holders)
    assert problem.kind == "kv_too_small_for_max_model_len"
    assert dict(problem.fix or {}) == {"max-model-len": 99632}


def test_vllm_metal_paged_attention_budget() -> None:
    """vllm-metal (Apple silicon) says its Metal budget in its own words, one figure group a line."""
    lines = [
        "ValueError: Paged attention: not enough Metal memory for KV cache.",
        "  metal_limit=26.80GB, fraction=0.98, usable_metal=26.26GB,",
        "  model_memory=19.74GB, overhead=2.09GB, kv_budget_before_hybrid=-11.9GB, kv_budget=-12.05GB.",
        "  Mitigations: increase VLLM_METAL_MEMORY_FRACTION, use a smaller or more quantized model",
    ]
    facts = parse_startup(lines)
    assert (facts.total_gpu_gib, facts.gpu_memory_utilization) == (26.8, 0.98)
    assert (facts.model_weights_gib, facts.available_kv_gib) == (19.74, -12.05)
    (problem,) = diagnose(lines, holders_of_port=_no_holders)
    assert problem.kind == "no_kv_memory" and problem.fix is None
    assert "VLLM_METAL_MEMORY_FRACTION" in problem.explanation and "19.74 GiB" in problem.explanation
    assert not_worth_retrying(lines) is not None


def test_cuda_error_out_of_memory_and_a_ranked_worker_prefix() -> None:
    """0.8-0.9's V1 workers say "(VllmWorker rank=3 pid=…)"; a graph capture's OOM can read "CUDA error: out of
    memory" rather than "CUDA out of memory"."""
    lines = [
        "(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470]     super().capture_end()",
        "(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] RuntimeError: CUDA error: "
        "out of memory",
    ]
    assert parse_startup(lines).engine == "V1"
    assert [p.kind for p in diagnose(lines, holders_of_port=_no_holders)] == ["cuda_oom"]
