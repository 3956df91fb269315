"""`core.vllm_memory.memory_rule`, keyed by (vLLM version, backend), and the preflight that follows it.

The 0.34 behaviour, from the vllm 0.34.0 wheel's source: `CacheConfig.resolved_gpu_memory_utilization`
(vllm/config/cache.py) makes an unset gpu-memory-utilization 1.0 with the extensible KV cache and 0.92
without; `VllmConfig._resolve_extensible_kv_cache` (vllm/config/vllm.py) turns that cache on when the
flag is unset on CUDA and ROCm (`is_cuda_alike`) unless kv-cache-memory-bytes or num-gpu-blocks-override
is set; `request_memory` (vllm/v1/worker/utils.py) skips the "Free memory on device … is less than
desired GPU memory utilization" refusal while it is on. 0.32 and 0.33 always refuse (0.92 by default)."""

from __future__ import annotations

import pytest

from vtui.core.model import InstanceSpec
from vtui.core.vllm_memory import memory_rule
from vtui.supervisor.preflight import gpu_memory_check
from vtui.telemetry.gpu import GpuInfo, GpuProcess, GpuSample

GIB = 1 << 30


@pytest.mark.parametrize("backend", ["cuda", "rocm"])
def test_034_unset_utilization_means_one_with_the_extensible_kv_cache(backend: str) -> None:
    rule = memory_rule({}, "0.34.0", backend)
    assert (rule.utilization, rule.utilization_set, rule.extensible_kv, rule.checks_free_memory) == (
        1.0,
        False,
        True,
        False,
    )
    assert "extensible KV cache" in rule.describe() and "does not check free memory" in rule.describe()


@pytest.mark.parametrize(
    ("flags", "backend"),
    [
        ({"kv-cache-memory-bytes": 8 * GIB}, "cuda"),
        ({"num-gpu-blocks-override": 512}, "cuda"),
        ({"enable-extensible-kv-cache": False}, "cuda"),
        ({}, "xpu"),
    ],
)
def test_034_without_the_extensible_kv_cache_keeps_092_and_the_check(flags: dict, backend: str) -> None:
    rule = memory_rule(flags, "0.34.1", backend)
    assert (rule.utilization, rule.extensible_kv, rule.checks_free_memory) == (0.92, False, True)


def test_a_set_utilization_is_kept_and_is_only_a_cap_with_the_extensible_cache() -> None:
    rule = memory_rule({"gpu-memory-utilization": 0.8}, "0.34.0", "cuda")
    assert (rule.utilization, rule.utilization_set, rule.extensible_kv, rule.checks_free_memory) == (
        0.8,
        True,
        True,
        False,
    )


@pytest.mark.parametrize("version", ["0.32.0", "0.33.2", None])
def test_older_releases_check_free_memory_with_their_parsers_default(version: str | None) -> None:
    rule = memory_rule({}, version, "cuda", default_utilization=0.92)
    assert (rule.utilization, rule.extensible_kv, rule.checks_free_memory) == (0.92, False, True)
    assert memory_rule({}, version, "cuda", default_utilization=0.9).utilization == 0.9
    assert memory_rule({"enable-extensible-kv-cache": True}, version, "cuda").extensible_kv is False


def test_cpu_checks_free_memory_only_in_032() -> None:
    assert memory_rule({}, "0.32.0", "cpu").checks_free_memory is True
    assert memory_rule({}, "0.33.0", "cpu").checks_free_memory is False
    assert memory_rule({}, "0.34.0", "cpu").extensible_kv is False  # CUDA and ROCm only


def _sample(used: int, total: int = 80 * GIB) -> GpuSample:
    gpus = (GpuInfo(0, "H100", used, total, None, None, None, None),)
    return GpuSample(True, None, gpus, (GpuProcess(0, 11, used, "other"),), 0.0)


def test_preflight_lets_vllm_034_start_where_032_was_refused() -> None:
    """40 GiB held by another process on an 80 GiB GPU: 0.32's rule asks 0.92 × 80 = 73.6 GiB free and
    refuses; 0.34's extensible KV cache asks no free memory at start, so the launch goes on."""
    spec = InstanceSpec(name="new", model="m", port=8000, gpus=(0,))
    busy = _sample(40 * GIB)
    assert gpu_memory_check(
        spec, busy, rule=memory_rule({}, "0.32.0", "cuda", default_utilization=0.92)
    ).problems
    result = gpu_memory_check(spec, busy, rule=memory_rule({}, "0.34.0", "cuda"))
    assert result.problems == [] and result.warnings == []
    assert "does not check free memory at start" in result.notes[0]
    # 0.34 without the extensible cache (kv-cache-memory-bytes set) checks again, with 0.92
    fixed = InstanceSpec(name="new", model="m", port=8000, gpus=(0,), flags={"kv-cache-memory-bytes": GIB})
    (line,) = gpu_memory_check(fixed, busy, rule=memory_rule(fixed.flags, "0.34.0", "cuda")).problems
    assert "gpu-memory-utilization 0.92 asks (73.60 GiB)" in line


def test_the_supervisors_rule_is_the_installed_vllms(tmp_path) -> None:
    """`target_memory_rule`: the release of the schema the layout was loaded with (no I/O of its own)."""
    from _support.fake_vllm import make_vllm_034

    from vtui.supervisor.preflight import target_memory_rule
    from vtui.telemetry import flagschema

    vllm = make_vllm_034(tmp_path / "fake")
    spec = InstanceSpec(name="new", model="m", port=8000, command=(str(vllm), "serve"))
    assert target_memory_rule(spec).version == "0.32.0"  # nothing read yet: the bundled default's
    assert flagschema.schema_for("vllm", spec.command).vllm_version == "0.34.0"
    rule = target_memory_rule(spec)
    assert (rule.version, rule.extensible_kv, rule.utilization) == ("0.34.0", True, 1.0)
    sim = InstanceSpec(name="s", model="m", port=8001, engine="sim")
    assert target_memory_rule(sim).checks_free_memory  # the sim plays 0.32
