"""vLLM 0.34 beside 0.32 and 0.33: the bundled 0.34 schema (from the 0.34.0 wheel's own serve parser, see
scripts/gen_flagspec.py) adds six flags and changes what an unset --gpu-memory-utilization means."""

from __future__ import annotations

from vtui.core.flagspec import BUILTIN_FLAGS, bundled_flags, bundled_version, validate_flag

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
