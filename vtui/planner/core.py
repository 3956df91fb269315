"""`plan(config, params) -> Plan`: how many tokens and requests a launch will hold, before launching it.

A pure function of frozen inputs, cheap enough for the flag editor to call on every keystroke. When
the KV budget is known (given in bytes / GiB, or read from vLLM's own log) the token count is vLLM's,
to the block; otherwise the budget is estimated from GPU memory (see `memory.ASSUMPTIONS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from vtui.core import vllm_memory
from vtui.core.flagspec import BUILTIN_FLAGS, VLLM_VERSION, int_flag
from vtui.planner import memory
from vtui.planner.config import ModelConfig, over_model_limit
from vtui.planner.kv import blocks_per_request, capacity, kv_layout
from vtui.planner.memory import GiB

# Per-layer KV bytes per token of special cache formats (vLLM's FP8 DeepSeek MLA layout).
_SPECIAL_KV_BYTES = {"fp8_ds_mla": 656}


def flag_default(name: str) -> Any:
    """A `vllm serve` flag's default in vLLM's own schema (core.flagspec): where the engine's come from."""
    return BUILTIN_FLAGS[name].default


@dataclass(frozen=True)
class PlanParams:
    """The `vllm serve` settings that decide memory. Defaults are the schema's (core.flagspec); None =
    what vLLM resolves at startup for `device` and the GPU's size (core.vllm_memory)."""

    tensor_parallel_size: int = flag_default("tensor-parallel-size")
    pipeline_parallel_size: int = flag_default("pipeline-parallel-size")
    dtype: str = flag_default("dtype")
    quantization: str | None = flag_default("quantization")
    kv_cache_dtype: str = flag_default("kv-cache-dtype")
    block_size: int | None = None  # None: 16 on GPUs, 128 on vLLM's CPU build
    device: str = "cuda"  # "cuda" | "cpu"
    gpu_memory_gib: float | None = None  # per GPU (NVML, or given)
    gpu_memory_utilization: float = flag_default("gpu-memory-utilization")
    kv_memory_bytes: int | None = None  # known KV budget per GPU: exact, skips the estimate
    kv_budget_source: str | None = None  # where kv_memory_bytes came from ("given", "log", ...)
    max_model_len: int | None = None  # None: the model's derived maximum
    max_num_seqs: int | None = None  # None: 1024 on GPUs of >= 70 GiB, else 256; CPU: 128 per rank
    max_num_batched_tokens: int | None = None  # None: 8192 on GPUs of >= 70 GiB, else 2048 (and CPU)
    enforce_eager: bool = flag_default("enforce-eager")
    async_scheduling: bool | None = None  # None: on for GPUs (2 batches in flight), off on CPU
    hybrid_kv_cache_manager: bool = True  # False = --disable-hybrid-kv-cache-manager
    # vLLM 0.34's extensible KV cache (core.vllm_memory.memory_rule): sized after warmup from what is free
    extensible_kv: bool = False

    @property
    def resolved_block_size(self) -> int:
        return self.block_size or (128 if self.device == "cpu" else 16)

    @property
    def resolved_max_num_seqs(self) -> int:
        return self.max_num_seqs or vllm_memory.default_max_num_seqs(
            self.gpu_memory_gib, self.device, self.tensor_parallel_size * self.pipeline_parallel_size
        )

    @property
    def resolved_max_num_batched_tokens(self) -> int:
        return self.max_num_batched_tokens or vllm_memory.default_max_num_batched_tokens(
            self.gpu_memory_gib,
            self.device,
            world_size=self.tensor_parallel_size * self.pipeline_parallel_size,
        )

    @property
    def in_flight_tokens(self) -> int:
        """vLLM's max_in_flight_tokens: concurrent batches × max-num-batched-tokens (sliding windows)."""
        pp = self.pipeline_parallel_size
        async_on = self.async_scheduling if self.async_scheduling is not None else self.device != "cpu"
        batches = (2 if pp <= 1 else pp) if async_on else pp
        return batches * self.resolved_max_num_batched_tokens


def params_from_flags(
    flags: Mapping[str, object],
    gpu_memory_gib: float | None,
    *,
    device: str = "cuda",
    kv_memory_bytes: int | None = None,
    kv_source: str | None = None,
    max_model_len: int | None = None,
    vllm_version: str | None = None,
) -> PlanParams:
    """PlanParams from `vllm serve` flags as a layout writes them (`gpu-memory-utilization = 0.92`);
    unset or invalid values take the engine's defaults (PlanParams'), never a planner-only guess.
    `vllm_version`: the target vLLM's, whose memory rule decides what an unset utilization means
    (`core.vllm_memory.memory_rule`: 1.0 with 0.34's extensible KV cache); None: the bundled 0.32's."""
    backend = "cpu" if device == "cpu" else "cuda"
    rule = vllm_memory.memory_rule(
        flags,
        vllm_version or VLLM_VERSION,
        backend,
        default_utilization=flag_default("gpu-memory-utilization"),
    )
    given_kv = int_flag(flags.get("kv-cache-memory-bytes"))
    if kv_memory_bytes is None and given_kv is not None:
        kv_memory_bytes, kv_source = given_kv, "kv-cache-memory-bytes"

    def text(name: str) -> str | None:
        value = flags.get(name)
        return value if isinstance(value, str) and value else None

    def positive(name: str) -> int | None:
        value = int_flag(flags.get(name))
        return value if value is not None and value > 0 else None

    defaults = PlanParams()
    return PlanParams(
        tensor_parallel_size=positive("tensor-parallel-size") or defaults.tensor_parallel_size,
        pipeline_parallel_size=positive("pipeline-parallel-size") or defaults.pipeline_parallel_size,
        dtype=text("dtype") or defaults.dtype,
        quantization=text("quantization") or defaults.quantization,
        kv_cache_dtype=text("kv-cache-dtype") or defaults.kv_cache_dtype,
        block_size=positive("block-size"),
        device=device,
        gpu_memory_gib=gpu_memory_gib,
        gpu_memory_utilization=rule.utilization,
        extensible_kv=rule.extensible_kv,
        kv_memory_bytes=kv_memory_bytes,
        kv_budget_source=kv_source,
        max_model_len=max_model_len or positive("max-model-len"),
        max_num_seqs=positive("max-num-seqs"),
        max_num_batched_tokens=positive("max-num-batched-tokens"),
        enforce_eager=flags.get("enforce-eager") is True,
        hybrid_kv_cache_manager=flags.get("disable-hybrid-kv-cache-manager") is not True,
    )


@dataclass(frozen=True)
class Plan:
    """The planner's answer. Byte figures are per GPU; `None` means "unknown without a budget"."""

    model: str
    max_model_len: int
    block_size: int
    model_dtype: str
    kv_dtype_bytes: float
    kv_heads_per_gpu: int
    layers_per_gpu: int
    kv_bytes_per_token: int
    bytes_per_block: int
    blocks_per_request: int
    weights_gib_per_gpu: float
    weights_source: str
    activation_gib: float
    non_torch_gib: float
    gpu_memory_gib: float | None
    available_kv_gib: float | None
    available_kv_bytes: int | None
    kv_budget_source: str
    num_gpu_blocks: int | None
    kv_cache_tokens: int | None
    kv_block_tokens: int | None
    max_concurrency: float | None
    max_model_len_fits: bool | None
    estimated_max_model_len: int | None
    sliding_window: int | None
    kv_groups: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = field(default=memory.ASSUMPTIONS)

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["kv_groups"] = list(self.kv_groups)
        data["warnings"] = list(self.warnings)
        data["assumptions"] = list(self.assumptions)
        return data


def _gib(value: int | float) -> float:
    return round(value / GiB, 4)


def plan(config: ModelConfig, params: PlanParams) -> Plan:
    """Plan one instance: weights, overheads, KV budget, and vLLM's block/token/concurrency arithmetic."""
    tp, pp = max(1, params.tensor_parallel_size), max(1, params.pipeline_parallel_size)
    warnings: list[str] = []
    model_dtype = memory.resolve_model_dtype(config, params.dtype)
    kv_dtype = params.kv_cache_dtype or "auto"
    kv_bytes = (
        memory.resolve_kv_dtype_bytes(kv_dtype, model_dtype) if kv_dtype not in _SPECIAL_KV_BYTES else 1
    )
    override = _SPECIAL_KV_BYTES.get(kv_dtype) if config.is_mla else None
    block_size = params.resolved_block_size
    layout = kv_layout(
        config,
        tp=tp,
        pp=pp,
        block_size=block_size,
        kv_dtype_bytes=kv_bytes,
        hybrid_manager=params.hybrid_kv_cache_manager,
        kv_bytes_per_token_override=override,
    )
    if not config.is_mla and tp > config.num_kv_heads:
        warnings.append(
            f"tensor-parallel-size {tp} > {config.num_kv_heads} KV heads: each GPU keeps a "
            "replicated KV head, so KV per GPU does not shrink past TP = KV heads"
        )
    max_len = params.max_model_len or config.max_position_embeddings
    too_long = over_model_limit(config, params.max_model_len)
    if too_long:
        warnings.append(too_long)

    total_weights, weights_source = memory.weights_bytes(config, model_dtype, params.quantization)
    weights = total_weights // (tp * pp)
    act = memory.activation_bytes(
        config,
        tp=tp,
        act_bytes=memory.dtype_bytes(model_dtype),
        max_num_batched_tokens=params.resolved_max_num_batched_tokens,
        max_num_seqs=params.resolved_max_num_seqs,
    )
    non_torch = vllm_memory.non_torch_bytes(tp, pp)
    if params.device == "cpu":
        act, non_torch = 0, 0  # vLLM's CPU build takes the KV size as given (--kv-cache-memory-bytes)

    available: int | None = None
    source = "unknown"
    if params.kv_memory_bytes is not None:
        available, source = int(params.kv_memory_bytes), params.kv_budget_source or "given"
    elif params.gpu_memory_gib:
        requested = params.gpu_memory_gib * params.gpu_memory_utilization * GiB
        available = int(requested - weights - act - non_torch)
        source = "estimate"
        if params.extensible_kv:
            warnings.append(
                "extensible KV cache (vLLM 0.34+): vLLM sizes it after warmup from the memory then free, "
                f"up to utilization {params.gpu_memory_utilization:g}; CUDA-graph memory and other "
                "processes on the GPU are not subtracted here"
            )
        if available <= 0:
            warnings.append("weights and overheads exceed gpu-memory × utilization: no room for a KV cache")

    cap = None
    if available is not None:
        cap = capacity(
            layout,
            available,
            max_len,
            in_flight_tokens=params.in_flight_tokens,
            len_limit=max(max_len, config.max_position_embeddings),
        )
        if not cap.fits:
            warnings.append(
                f"max-model-len {max_len} does not fit: vLLM would fail at startup; "
                f"the longest that fits is {cap.estimated_max_model_len}"
            )
    groups = tuple(f"{g.kind}:{max(g.layers_per_stage)}" for g in layout.groups)
    return Plan(
        model=config.name,
        max_model_len=max_len,
        block_size=block_size,
        model_dtype=model_dtype,
        kv_dtype_bytes=kv_bytes,
        kv_heads_per_gpu=layout.kv_heads_per_gpu,
        layers_per_gpu=layout.layers_per_gpu,
        kv_bytes_per_token=layout.kv_bytes_per_token,
        bytes_per_block=layout.bytes_per_block,
        blocks_per_request=blocks_per_request(layout, max_len, params.in_flight_tokens),
        weights_gib_per_gpu=_gib(weights),
        weights_source=weights_source,
        activation_gib=_gib(act),
        non_torch_gib=_gib(non_torch),
        gpu_memory_gib=params.gpu_memory_gib,
        available_kv_gib=_gib(available) if available is not None else None,
        available_kv_bytes=available,
        kv_budget_source=source,
        num_gpu_blocks=cap.num_blocks if cap else None,
        kv_cache_tokens=cap.kv_cache_tokens if cap else None,
        kv_block_tokens=cap.block_tokens if cap else None,
        max_concurrency=round(cap.max_concurrency, 4) if cap else None,
        max_model_len_fits=cap.fits if cap else None,
        estimated_max_model_len=cap.estimated_max_model_len if cap else None,
        sliding_window=layout.window,
        kv_groups=groups,
        warnings=tuple(warnings),
    )
