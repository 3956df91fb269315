"""vLLM 0.34 beside 0.32 and 0.33: the bundled 0.34 schema (from the 0.34.0 wheel's own serve parser, see
scripts/gen_flagspec.py) adds six flags and changes what an unset --gpu-memory-utilization means."""

from __future__ import annotations

from vtui.core.flagspec import BUILTIN_FLAGS, bundled_flags, bundled_version, validate_flag
from vtui.telemetry.diagnosis import diagnose
from vtui.telemetry.startup_log import parse_startup

T033 = bundled_flags("0.33.0")
T034 = bundled_flags("0.34.0")

NEW_IN_034 = {
    "cache-aware-admission-threshold",
    "cache-aware-admission-window",
    "checkpoint-prepare-on-startup",
    "enable-extensible-kv-cache",
    "max-num-inflight-kv-loads",
    "shuffle-safetensors-files",
}


def test_bundled_034_schema_adds_six_flags_and_removes_none() -> None:
    assert T034 is not T033 and T034 is not BUILTIN_FLAGS and bundled_flags("0.34.2+cu130") is T034
    assert set(T034) - set(T033) == NEW_IN_034
    assert set(T033) <= set(T034)
    assert bundled_version("0.34.1") == "0.34.0"


def test_extensible_kv_cache_is_a_switch_and_utilization_has_no_fixed_default() -> None:
    spec = T034["enable-extensible-kv-cache"]
    assert (spec.type, spec.negatable, spec.default) == ("bool", True, None)
    assert validate_flag("enable-extensible-kv-cache", False, T034) is None
    assert "unknown" in (validate_flag("enable-extensible-kv-cache", True, T033) or "")
    # 0.34's CacheConfig.gpu_memory_utilization: None, resolved at start (0.32 and 0.33: 0.92)
    assert T034["gpu-memory-utilization"].default is None
    assert T033["gpu-memory-utilization"].default == 0.92 == BUILTIN_FLAGS["gpu-memory-utilization"].default


# -- the memory rule in what vtui advises ----------------------------------------------------------------

EXTENDED = (
    "(EngineCore pid=3210) INFO 03-02 10:00:53 [extensible_kv_cache.py:537] "
    "Extended KV cache to 24448 blocks (53.71 GiB)."
)
VERSION_034 = (
    "(EngineCore pid=3210) INFO 03-02 10:00:15 [core.py:133] Initializing a V1 LLM engine (v0.34.0) with "
    "config: model='Qwen/Qwen3-8B'"
)
PREEMPTED = (
    "WARNING 03-02 10:05:00 [scheduler.py:1] Sequence group 7 is preempted by PreemptionMode.RECOMPUTE mode "
    "because there is not enough KV cache space."
)


def test_diagnose_reads_the_extended_kv_cache_as_a_fact() -> None:
    """vllm/v1/worker/extensible_kv_cache.py `extend_kv_cache` (0.34.0) logs the size the cache was
    committed to after warmup: `diagnose` shows it, and takes it as proof of the extensible KV cache."""
    from vtui.commands.diagnose import render
    from vtui.telemetry.kvshort import run_memory_rule

    facts = parse_startup([VERSION_034, EXTENDED])
    assert facts.extended_kv_gib == 53.71 and facts.to_json()["extended_kv_gib"] == 53.71
    assert "KV cache extended to" in render(facts, []) and "53.71 GiB" in render(facts, [])
    rule = run_memory_rule(facts)
    assert rule is not None and (rule.extensible_kv, rule.utilization, rule.checks_free_memory) == (
        True,
        1.0,
        False,
    )
    # no version in the log: the extended line alone says the cache was extensible
    alone = run_memory_rule(parse_startup([EXTENDED]))
    assert alone is not None and alone.extensible_kv
    assert run_memory_rule(parse_startup(["INFO hello"])) is None


def test_kv_short_advice_does_not_offer_raising_an_already_full_utilization() -> None:
    """0.32's advice raises an unset utilization; with 0.34's extensible KV cache it is already 1.0."""
    old = diagnose([PREEMPTED], holders_of_port=lambda _p: [])
    new = diagnose([VERSION_034, EXTENDED, PREEMPTED], holders_of_port=lambda _p: [])
    assert [p.kind for p in old] == [p.kind for p in new] == ["kv_cache_short"]
    assert any("raise --gpu-memory-utilization toward" in r for r in old[0].remedies)
    assert not any("raise --gpu-memory-utilization" in r for r in new[0].remedies)
    assert any("extensible KV cache already takes all memory" in r for r in new[0].remedies)


def test_the_runtime_fix_follows_the_rule() -> None:
    from vtui.core.vllm_memory import memory_rule
    from vtui.telemetry.kvshort import _kv_short_fix

    flags: dict[str, object] = {"max-num-seqs": 256, "kv-cache-dtype": "auto"}
    assert _kv_short_fix(None, flags) == {"gpu-memory-utilization": 0.92}  # no rule: 0.9 assumed
    # 0.34 on CUDA: unset is 1.0, so the next remedy (fp8 KV) comes first
    assert _kv_short_fix(None, flags, memory_rule(flags, "0.34.0", "cuda")) == {"kv-cache-dtype": "fp8"}


def test_flag_advice_follows_the_rule() -> None:
    from vtui.core.advice import flag_advice
    from vtui.core.vllm_memory import memory_rule

    high = {"gpu-memory-utilization": 0.97}
    assert any("above 0.95" in line for line in flag_advice(high))
    assert any("above 0.95" in line for line in flag_advice(high, memory_rule(high, "0.33.0", "cuda")))
    extensible = flag_advice(high, memory_rule(high, "0.34.0", "cuda"))
    assert not any("above 0.95" in line for line in extensible)
    assert any("caps vLLM 0.34.0's extensible KV cache" in line for line in extensible)
    assert flag_advice({}, memory_rule({}, "0.34.0", "cuda")) == []
