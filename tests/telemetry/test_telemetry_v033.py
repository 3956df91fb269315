"""vLLM 0.33 next to 0.32: its flags (the bundled 0.33 schema, its enable/disable switch pairs, the parser's
new home), the fallback to the bundled table of the installed release, and the "0.33 format tests": log
lines and /metrics text as 0.33 writes them through vtui's parsers.

The 0.33 lines and metric text below are rendered from the format strings of the vllm 0.33.0 wheel's
source (file:line named beside each), with realistic values; they were not captured from a 0.33 run (no
GPU here, and the wheel is the CUDA build). Between 0.32.0 and 0.33.0 none of the lines vtui reads changed
its wording; the "non-default args" line moved to vllm/entrypoints/common/startup.py (its logger prefix
says `[startup.py:96]`, 0.32's said `[api_utils.py:286]`), and v1/metrics/loggers.py is byte-identical.
On the CPU backend 0.33 dropped the startup check "... on startup is less than desired CPU memory
utilization" and added "The worker already uses X GiB ..., leaving none for the KV cache".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _support.fake_vllm import make_vllm_033

from vtui.core import flagspec
from vtui.core.flagspec import BUILTIN_FLAGS, bundled_flags, bundled_version, validate_flag
from vtui.telemetry import flagschema
from vtui.telemetry.diagnosis import diagnose
from vtui.telemetry.metrics import MetricsWindow
from vtui.telemetry.promtext import parse_metrics
from vtui.telemetry.startup_log import parse_startup

T033 = bundled_flags("0.33.0")


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    flagschema._MEMO.clear()


# -- flags ------------------------------------------------------------------------------------------


def test_bundled_033_schema_is_its_own_table() -> None:
    assert T033 is not BUILTIN_FLAGS and bundled_flags("0.33.4") is T033 and len(T033) == 320
    new = set(T033) - set(BUILTIN_FLAGS)
    assert new == {"monokernel", "reasoning-effort-map", "sleep-mode-backend", "watchdog-config"}
    assert set(BUILTIN_FLAGS) <= set(T033)  # 0.33 removed no flag
    assert T033["watchdog-config"].type == "json" and T033["sleep-mode-backend"].default == "cumem"
    assert "octave_k3v4" in (T033["kv-cache-dtype"].choices or ())
    assert "octave_k3v4" not in (BUILTIN_FLAGS["kv-cache-dtype"].choices or ())
    assert T033["tool-strict-level"].default is None and BUILTIN_FLAGS["tool-strict-level"].default == "auto"
    assert validate_flag("watchdog-config", {"dump_dir": "/tmp/d"}, T033) is None
    assert "unknown" in (validate_flag("watchdog-config", {"dump_dir": "/tmp/d"}) or "")  # 0.32: no such flag


@pytest.mark.parametrize(
    ("version", "release"),
    [
        ("0.33.0", "0.33.0"),
        ("0.33.2+cu130", "0.33.0"),
        ("0.34.0.dev12+g1a2b", "0.34.0"),
        ("0.35.0.dev3", "0.34.0"),
        ("0.32.0+cpu", "0.32.0"),
    ]
    + [("0.10.1", "0.32.0"), (None, "0.32.0"), ("unknown", "0.32.0")],
)
def test_bundled_version(version: str | None, release: str) -> None:
    assert bundled_version(version) == release


def test_033_switch_pairs_are_switches_not_aliases() -> None:
    """0.33's help writes `--enable-prefix-caching, --disable-prefix-caching` where 0.32 wrote
    `--enable-prefix-caching, --no-enable-prefix-caching`: still a switch that can be turned off."""
    help_033 = (flagspec.HELP_FILE.parent / "serve_help_0_33.txt").read_text(encoding="utf-8")
    assert "  --enable-prefix-caching, --disable-prefix-caching\n" in help_033
    for name in (
        "enable-prefix-caching",
        "enable-chunked-prefill",
        "disable-sliding-window",
        "enable-sleep-mode",
    ):
        spec = T033[name]
        assert (spec.type, spec.negatable, spec.aliases) == ("bool", True, ()), name
        assert validate_flag(name, False, T033) is None
    assert T033["enable-expert-parallel"].aliases == ("-ep",)  # a real alias stays one
    assert flagspec.canonical_name("disable-prefix-caching", T033) is None  # the opposite, not an alias
    assert flagspec.suggest("disable-prefix-caching", T033) == "enable-prefix-caching"
    assert T033["disable-log-stats"].negatable is False  # a plain store_true switch has no inverse
    # a help quoting another default before its own: the last one is the flag's
    assert T033["enable-log-requests"].default is False


def test_a_033_parser_is_read_from_its_new_home(tmp_path: Path) -> None:
    vllm = make_vllm_033(tmp_path / "v033")
    schema = flagschema.installed_schema([str(vllm), "serve"])
    assert (schema.source, schema.vllm_version) == ("installed", "0.33.0")
    switch = schema.flags["enable-prefix-caching"]
    assert (switch.type, switch.negatable, switch.aliases) == ("bool", True, ())
    assert "disable-prefix-caching" not in schema.flags
    assert flagschema.unknown_flags({"enable-prefix-caching": False, "watchdog-config": "{}"}, schema) == []
    assert flagschema.unknown_flags({"max-model-len": 4096}, schema) == [
        ("max-model-len", "not a flag of vLLM 0.33.0")
    ]


def test_an_unreadable_033_falls_back_to_the_bundled_033_table(tmp_path: Path) -> None:
    vllm = make_vllm_033(tmp_path / "v033", version="0.33.1")
    (tmp_path / "v033" / "site" / "vllm" / "entrypoints" / "common" / "cli_args.py").write_text(
        "raise ImportError('needs CUDA')\n"
    )
    schema = flagschema.installed_schema([str(vllm), "serve"])
    assert (schema.source, schema.vllm_version) == ("bundled", "0.33.0") and schema.flags is T033
    assert "vLLM 0.33.1 is installed" in schema.label() and "bundled vLLM 0.33.0 schema" in schema.label()
    # the bundled 0.33 table then decides what is valid: 0.33's flags accepted, unknown ones named
    assert flagschema.unknown_flags({"watchdog-config": "{}", "enable-prefix-caching": False}, schema) == []
    assert flagschema.unknown_flags({"fancy": 1}, schema) == [("fancy", "not a flag of vLLM 0.33.0")]
    assert flagschema.union_table([schema]) is not None and "watchdog-config" in flagschema.union_table(
        [schema]
    )


# -- the 0.33 format tests: startup log -------------------------------------------------------------

# Rendered from 0.33.0's format strings (vllm/...:line), values of a Qwen3-8B start on one 80 GiB GPU.
LOG_033 = """\
(APIServer pid=41) INFO 11-01 09:25:06 [launcher.py:367] vLLM server version 0.33.0, serving model Qwen/Qwen3-8B
(APIServer pid=41) INFO 11-01 09:25:06 [startup.py:96] non-default args: {'model_tag': 'Qwen/Qwen3-8B', 'api_key': '***', 'max_model_len': 32768, 'gpu_memory_utilization': 0.9, 'enable_prefix_caching': False}
(APIServer pid=41) INFO 11-01 09:25:12 [model.py:2170] Using max model len 32768
(EngineCore pid=77) INFO 11-01 09:25:15 [core.py:140] Initializing a V1 LLM engine (v0.33.0) with config: model='Qwen/Qwen3-8B', speculative_config=None, tokenizer='Qwen/Qwen3-8B', dtype=torch.bfloat16, max_seq_len=32768, download_dir=None
(EngineCore pid=77) INFO 11-01 09:25:18 [gpu_model_runner.py:4979] Starting to load model Qwen/Qwen3-8B...
(EngineCore pid=77) INFO 11-01 09:25:31 [default_loader.py:507] Loading weights took 11.84 seconds
(EngineCore pid=77) INFO 11-01 09:25:32 [gpu_model_runner.py:5089] Model loading took 15.27 GiB memory and 13.402118 seconds
(EngineCore pid=77) INFO 11-01 09:25:44 [backends.py:1188] Dynamo bytecode transform time: 7.91 s
(EngineCore pid=77) INFO 11-01 09:26:02 [backends.py:418] Compiling a graph for compile range (1, 8192) takes 16.40 s
(EngineCore pid=77) INFO 11-01 09:26:05 [gpu_worker.py:773] Available KV cache memory: 54.63 GiB
(EngineCore pid=77) INFO 11-01 09:26:05 [kv_cache_utils.py:1148] GPU KV cache size: 397,776 tokens, Maximum concurrency for 32,768 tokens per request: 12.14x
(EngineCore pid=77) INFO 11-01 09:26:19 [gpu_model_runner.py:6517] Graph capturing finished in 14 secs, took 0.61 GiB
(EngineCore pid=77) INFO 11-01 09:26:19 [core.py:413] init engine (profile, create kv cache, warmup model) took 47.18 s
(APIServer pid=41) INFO 11-01 09:26:21 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000
"""

LOGO_033 = (
    "(APIServer pid=41) INFO 11-01 09:25:06 [launcher.py:367] \n"
    "(APIServer pid=41)        █     █     █▄   ▄█\n"
    "(APIServer pid=41)  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0\n"
    "(APIServer pid=41)   █▄█▀ █     █     █     █  model   Qwen/Qwen3-8B\n"
    "(APIServer pid=41)    ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀\n"
)


def test_033_startup_log_facts() -> None:
    facts = parse_startup(LOG_033.splitlines())
    assert facts.to_json() == {
        "vllm_version": "0.33.0",
        "engine": "V1",
        "max_model_len": 32768,
        "model_weights_gib": 15.27,
        "model_load_secs": 13.402118,
        "gpu_memory_utilization": 0.9,
        "available_kv_gib": 54.63,
        "kv_cache_tokens": 397776,
        "max_concurrency": 12.14,
        "max_concurrency_for_tokens": 32768,
        "init_engine_secs": 47.18,
        "cuda_graph_capture_secs": 14.0,
    }
    assert facts.model == "Qwen/Qwen3-8B" and facts.model_load_secs == 13.402118
    assert facts.arg("api_key") == "***" and facts.arg("enable_prefix_caching") is False
    assert facts.kv_memory_bytes == round(54.63 * 2**30)


def test_033_logo_banner_gives_version_and_model() -> None:
    """common/startup.py:18-26's logo (monochrome, as a log file gets it), then the run's lines."""
    facts = parse_startup((LOGO_033 + LOG_033.split("\n", 1)[1]).splitlines())
    assert facts.vllm_version == "0.33.0" and facts.model == "Qwen/Qwen3-8B"
    assert facts.kv_cache_tokens == 397776


def test_033_plain_banner_gives_version_and_model() -> None:
    """common/startup.py:18's plain form (VLLM_DISABLE_LOG_LOGO, or a logger vLLM did not configure): the
    only line of a run that says the version and the model before the engine starts."""
    line = "(APIServer pid=41) INFO 11-01 09:25:06 [launcher.py:367] vLLM server version 0.33.0, serving model Qwen/Qwen3-8B"
    facts = parse_startup([line])
    assert (facts.vllm_version, facts.model) == ("0.33.0", "Qwen/Qwen3-8B")
    # a paste wrapped at the terminal's width (120 columns) cuts the model path; the reader joins it
    wrapped = [
        "(APIServer pid=84) INFO 10-10 01:25:08 [api_utils.py:347] vLLM server version 0.30.0, serving model /s/hf/MiniMaxAI/Mini",
        "Max-H3/",
        "(APIServer pid=84) INFO 10-10 01:25:08 [api_utils.py:286] non-default args: {'model_tag': '/s/hf/MiniMaxAI/MiniMax-H3/',",
    ]
    facts = parse_startup(wrapped)
    assert (facts.vllm_version, facts.model) == ("0.30.0", "/s/hf/MiniMaxAI/MiniMax-H3/")
    # a second run appended to the same log starts the facts afresh
    facts = parse_startup([*LOG_033.splitlines(), line.replace("0.33.0", "0.33.1")])
    assert facts.vllm_version == "0.33.1" and facts.kv_cache_tokens is None


def test_033_kv_cache_too_small_failure() -> None:
    """v1/core/kv_cache_planning.py:77 (0.32 raised it from kv_cache_utils.py; same words)."""
    line = (
        "(EngineCore pid=77) ValueError: To serve at least one request with the model's max seq len "
        "(131072), (18.00 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(9.13 GiB). Based on the available memory, the estimated maximum model length is 66464. Try "
        "increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
        "decreasing `max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )
    facts = parse_startup([line])
    assert (facts.max_model_len, facts.kv_needed_gib, facts.available_kv_gib) == (131072, 18.0, 9.13)
    assert facts.estimated_max_model_len == 66464


# -- the 0.33 format tests: /metrics ----------------------------------------------------------------

# v1/metrics/loggers.py (identical in 0.32.0 and 0.33.0): names, help and labels as prometheus_client
# writes them for one engine; values of a busy instance.
METRICS_033 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 12.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.4375
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-8B"} 120000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-8B"} 30000.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen3-8B"} 2.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 480000.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 96000.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="Qwen/Qwen3-8B"} 100.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="Qwen/Qwen3-8B"} 380.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-8B"} 400.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3-8B"} 400.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen3-8B"} 72.5
# HELP vllm:kv_offload_config_info Static KV offload configuration (new in 0.33; not one vtui reads).
# TYPE vllm:kv_offload_config_info gauge
vllm:kv_offload_config_info{engine="0",model_name="Qwen/Qwen3-8B",tiers="cpu"} 1.0
"""


def test_033_metrics_through_the_window() -> None:
    first = MetricsWindow().update(parse_metrics(METRICS_033), at=100.0, instance="a")
    assert (first.running, first.waiting, first.kv_usage) == (12.0, 3.0, 0.4375)
    assert first.prefix_hit_rate == 0.25 and first.preemptions_total == 2.0
    assert first.prompt_tokens_total == 480000.0 and first.generation_tokens_total == 96000.0
    assert first.vllm_names == "v1" and first.engines == 1
    assert first.ttft.p50 is not None and 0.1 < first.ttft.p50 <= 0.5
    later = METRICS_033.replace("} 96000.0", "} 98000.0").replace("} 480000.0", "} 490000.0")
    window = MetricsWindow()
    window.update(parse_metrics(METRICS_033), at=100.0)
    sample = window.update(parse_metrics(later), at=110.0)
    assert (sample.generation_tps, sample.prompt_tps) == (200.0, 1000.0)


# -- the 0.33 format tests: the CPU backend's memory failures --------------------------------------------

# v1/worker/cpu_worker.py:228 (new in 0.33; its startup check "on startup is less than desired CPU memory
# utilization" is gone) and :242 (0.32's words too), rendered with the figures of a small CPU box.
CPU_FOOTPRINT = (
    "(EngineCore pid=77) ValueError: The worker already uses 3.91 GiB (model weights and runtime), more than "
    "the 3.13 GiB of CPU memory reserved for it on node 0, leaving none for the KV cache. On the CPU backend, "
    "the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved (despite its name). To "
    "resolve: increase `--gpu-memory-utilization` to more than 0.13, or set the KV cache size explicitly with "
    "`--kv-cache-memory-bytes` or VLLM_CPU_KVCACHE_SPACE."
)
CPU_KV_SHORT = (
    "(EngineCore pid=77) ValueError: Available memory on node 0 (1.20/31.25 GiB) on kv cache allocation is "
    "less than requested memory for kv (2.50 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, "
    "or reduce CPU memory used by other processes."
)


def test_033_cpu_reservation_below_the_workers_footprint() -> None:
    (problem,) = [p for p in diagnose([CPU_FOOTPRINT]) if p.kind == "cpu_reservation_below_footprint"]
    assert dict(problem.fix or {}) == {"gpu-memory-utilization": 0.18}  # vLLM's "more than 0.13", + 0.05
    assert "3.91 GiB" in problem.explanation and "3.13 GiB" in problem.explanation


def test_033_cpu_memory_short_for_the_kv_cache() -> None:
    facts = parse_startup(
        ["INFO 11-01 09:25:06 [startup.py:96] non-default args: {'kv_cache_memory_bytes': 2684354560}"]
    )
    (problem,) = [p for p in diagnose([CPU_KV_SHORT], facts) if p.kind == "cpu_memory_short_for_kv"]
    assert dict(problem.fix or {}) == {"kv-cache-memory-bytes": int(1.20 * 0.9 * 2**30)}
    assert "1.2 GiB of 31.25 GiB is free on node 0" in problem.explanation
    unset = [p for p in diagnose([CPU_KV_SHORT]) if p.kind == "cpu_memory_short_for_kv"]
    assert unset and unset[0].fix is None  # sized by utilization: the remedies say what to try
