"""vLLM's memory arithmetic for the simulated GPU, and the registry that lets sim instances on one machine
see each other's memory on the same (simulated) GPU, as vLLM instances pinned to one card do.

KV budget = utilization × GPU memory − weights per GPU − activation peak − non-torch overhead (or
--kv-cache-memory-bytes); bytes per token = 2 × layers × KV heads per GPU × head dim × dtype bytes;
the cache is whole blocks of block-size tokens. The tables (dtype and quantized-weight bytes) and the
overhead estimate are core.vllm_memory's, the planner's too: the sim plays vLLM as the planner predicts
it. The block arithmetic here stays the sim's own (plain full-attention models only), so a planner that
got vLLM's blocks wrong would still disagree with the sim's log (tests/e2e/test_e2e_planner.py).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from vtui.core import vllm_memory
from vtui.sim.gpus import GpuRegistry, registry_dir  # noqa: F401 - re-exported for the sim
from vtui.sim.models import ModelShape

GIB = vllm_memory.GiB


def weight_dtype(shape: ModelShape, dtype: str | None) -> str:
    """The dtype vLLM runs with (core.vllm_memory: `auto` casts float32 checkpoints to bfloat16)."""
    return vllm_memory.resolve_model_dtype(shape.dtype, dtype)


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    return vllm_memory.kv_dtype_bytes(kv_cache_dtype, model_dtype)


@dataclass(frozen=True)
class KvPlan:
    total_bytes: int  # simulated GPU memory
    requested_bytes: int  # utilization × total
    weights_bytes: int  # per GPU
    activation_bytes: int
    non_torch_bytes: int
    available_bytes: int  # the KV budget (may be <= 0)
    bytes_per_token: int  # per GPU
    block_size: int
    num_blocks: int
    max_model_len: int

    @property
    def tokens(self) -> int:
        """What vLLM 0.32 logs and labels as the KV cache size: int(max concurrency × max-model-len),
        which differs from num_blocks × block_size when max-model-len is not a whole number of blocks."""
        return int(self.max_concurrency * self.max_model_len)

    @property
    def fit_budget(self) -> int:
        """vLLM holds one block back when checking that a request of a given length fits."""
        return self.available_bytes - self.block_size * self.bytes_per_token

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / max(1, math.ceil(self.max_model_len / self.block_size))

    def needed_bytes(self, length: int) -> int:
        return math.ceil(length / self.block_size) * self.block_size * self.bytes_per_token

    def estimated_max_len(self) -> int:
        """vLLM's binary search: the longest context whose KV cache fits the budget."""
        lo, hi = 0, max(1, self.max_model_len)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.needed_bytes(mid) <= self.fit_budget:
                lo = mid
            else:
                hi = mid - 1
        return lo


def plan_kv(
    shape: ModelShape,
    *,
    gpu_bytes: int,
    utilization: float,
    tp: int,
    pp: int,
    dtype: str,
    quantization: str | None,
    kv_cache_dtype: str,
    block_size: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    kv_cache_memory_bytes: int | None = None,
    num_gpu_blocks_override: int | None = None,
    cpu_offload_gib: float = 0.0,
) -> KvPlan:
    wdtype = weight_dtype(shape, dtype)
    dbytes = vllm_memory.dtype_bytes(wdtype)
    embed = shape.vocab * shape.hidden * (1 if shape.tie_word_embeddings else 2)
    body = max(0.0, shape.params - embed)
    per_param = vllm_memory.linear_bytes_per_param(quantization) or dbytes
    weights = (body * per_param + embed * dbytes) / (tp * pp) - cpu_offload_gib * GIB
    weights = int(max(0.0, weights))
    activation = vllm_memory.activation_peak_bytes(
        hidden=shape.hidden,
        intermediate=shape.intermediate,
        vocab=shape.vocab,
        tp=tp,
        act_bytes=dbytes,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
    )
    non_torch = vllm_memory.non_torch_bytes(tp, pp)
    requested = int(utilization * gpu_bytes)
    if kv_cache_memory_bytes is not None:
        available = int(kv_cache_memory_bytes)
    else:
        available = requested - weights - activation - non_torch
    layers_per_gpu = max(1, math.ceil(shape.layers / pp))
    per_token = (
        2
        * layers_per_gpu
        * max(1, shape.kv_heads // tp)
        * shape.head_dim
        * kv_dtype_bytes(kv_cache_dtype, wdtype)
    )
    blocks = max(0, available // (per_token * block_size)) if available > 0 else 0
    if num_gpu_blocks_override:
        blocks = int(num_gpu_blocks_override)
    return KvPlan(
        gpu_bytes,
        requested,
        weights,
        activation,
        non_torch,
        available,
        per_token,
        block_size,
        int(blocks),
        max_model_len,
    )


# -- which physical GPUs this instance lands on -----------------------------------------------------


def physical_gpus(count: int, num_gpus: int) -> list[int]:
    """The physical GPU ids the first `count` ranks use, from CUDA_VISIBLE_DEVICES (else 0..count-1)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = (
        [int(x) for x in visible.split(",") if x.strip().lstrip("-").isdigit()]
        if visible
        else list(range(num_gpus))
    )
    return ids[:count] if len(ids) >= count else ids
