"""vLLM's memory arithmetic, shared by the planner (`vtui.planner`) and the simulated engine (`vtui.sim`):
bytes per element of a dtype, weight bytes per parameter under a quantization method, what `--dtype auto`
and `--kv-cache-dtype auto` resolve to, the batch defaults vLLM picks by GPU size, vtui's estimate
of what vLLM's profiling run measures besides the weights (activation peak, non-torch memory), and
`memory_rule`: what --gpu-memory-utilization means per vLLM release and backend (0.34's extensible KV
cache), the one rule preflight, the planner and the KV advice follow.

One home: the sim plays vLLM with these numbers and the planner predicts with them, so a planned figure
and the sim's log differ only by what each knows of the model. Stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

GiB = 1 << 30

DTYPE_BYTES: Mapping[str, int] = MappingProxyType(
    {
        "float32": 4,
        "fp32": 4,
        "float": 4,
        "float16": 2,
        "fp16": 2,
        "half": 2,
        "bfloat16": 2,
        "bf16": 2,
        "fp8": 1,
        "fp8_e4m3": 1,
        "fp8_e5m2": 1,
        "fp8_inc": 1,
        "float8_e4m3fn": 1,
        "int8": 1,
        "fp8_per_token_head": 1,
        "int8_per_token_head": 1,
    }
)

# Weight bytes per parameter of the linear layers under a quantization method; embeddings and the LM
# head stay in the model dtype. From the checkpoint layouts vLLM loads:
#  - AWQ / GPTQ (and their Marlin kernels, which repack to the same size) int4, group size 128: packed
#    int4 weights 0.5 B + an fp16 scale (2 B) and a packed int4 zero point (0.5 B) per 128 weights
#    = 0.5 + 2.5/128 ≈ 0.52 B. The bare 0.5 forgets the scales and zeros (~4 % of the weights).
#  - fp8 (fp8, fbgemm_fp8, modelopt): 1 B plus per-channel or per-tensor scales (negligible).
#  - mxfp4: 4 bits plus one 8-bit scale per 32 weights = 0.5 + 1/32 ≈ 0.53 B.
#  - bitsandbytes nf4: 4 bits plus absmax per 64-weight block (double-quantised) ≈ 0.55 B.
#  - compressed-tensors is a container, not a width: its config's `num_bits` decides (W4A16 → 0.52 B,
#    W8A8 int8 / fp8 → 1 B, see `linear_bytes_per_param`); stated nowhere, the 8-bit schemes (1 B).
QUANT_LINEAR_BYTES: Mapping[str, float] = MappingProxyType(
    {
        "awq": 0.52,
        "gptq": 0.52,
        "awq_marlin": 0.52,
        "gptq_marlin": 0.52,
        "marlin": 0.52,
        "bitsandbytes": 0.55,
        "fp8": 1.0,
        "fbgemm_fp8": 1.0,
        "modelopt": 1.0,
        "mxfp4": 0.53,
        "compressed-tensors": 1.0,
    }
)
_GROUPED_INT = frozenset({"awq", "gptq", "awq_marlin", "gptq_marlin", "marlin", "compressed-tensors"})
_GROUP_OVERHEAD = 2.5 / 128  # fp16 scale + int4 zero point per group of 128


def dtype_bytes(name: str) -> int:
    """Bytes per element of a torch dtype name ('bfloat16', 'torch.float16', 'fp8', ...)."""
    key = name.lower().replace("torch.", "")
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[key]


def linear_bytes_per_param(quantization: str | None, bits: int | None = None) -> float | None:
    """Weight bytes per linear-layer parameter under `quantization` (None: not quantized / unknown).
    `bits` (the checkpoint's declared width) refines the grouped-integer formats."""
    if not quantization:
        return None
    method = quantization.lower()
    if bits is not None and method in _GROUPED_INT and 0 < bits <= 16:
        return bits / 8 + (_GROUP_OVERHEAD if bits < 8 else 0.0)
    return QUANT_LINEAR_BYTES.get(method)


def resolve_model_dtype(checkpoint_dtype: str, dtype: str | None = "auto") -> str:
    """vLLM's `--dtype`: `auto` keeps a 16-bit checkpoint's dtype and casts float32 checkpoints to
    bfloat16 (vLLM's preferred dtype on GPUs that have it; vLLM < 0.7 used float16)."""
    if dtype and dtype != "auto":
        return {"half": "float16", "float": "float32"}.get(dtype, dtype)
    key = checkpoint_dtype.lower().replace("torch.", "")
    return "bfloat16" if key in ("float32", "float", "fp32") else key


def kv_dtype_bytes(kv_cache_dtype: str | None, model_dtype: str) -> int:
    """`--kv-cache-dtype`: auto = the model dtype; the 8-bit formats (fp8*, int8*) 1 byte, and so are
    the packed 4- and 3-bit ones (nvfp4*, int4*, turboquant*, ultraquant*): an upper bound, their
    packed page layouts are not modelled."""
    if not kv_cache_dtype or kv_cache_dtype == "auto":
        return dtype_bytes(model_dtype)
    if kv_cache_dtype.startswith(("fp8", "int8", "nvfp4", "int4", "turboquant", "ultraquant")):
        return 1
    return dtype_bytes(kv_cache_dtype)


# -- defaults vLLM resolves at startup (not in the flag schema: they depend on the GPU) ---------------

BIG_GPU_GIB = 70  # vLLM's threshold for the bigger API-server batch defaults (H100/H200/A100-80G class)


def default_max_num_seqs(gpu_memory_gib: float | None, device: str = "cuda", world_size: int = 1) -> int:
    """vLLM's `--max-num-seqs` when unset, for the OpenAI API server: 1024 on GPUs of >= 70 GiB, else 256;
    on its CPU build 128 per rank of the world (tensor x pipeline parallel), as `EngineArgs.
    get_batch_defaults` sets it."""
    if device == "cpu":
        return 128 * max(1, world_size)
    return 1024 if gpu_memory_gib is not None and gpu_memory_gib >= BIG_GPU_GIB else 256


def default_max_num_batched_tokens(
    gpu_memory_gib: float | None,
    device: str = "cuda",
    *,
    chunked_prefill: bool = True,
    max_model_len: int | None = None,
    world_size: int = 1,
) -> int:
    """vLLM's `--max-num-batched-tokens` when unset, for the OpenAI API server: 8192 on GPUs of >= 70 GiB,
    else 2048 (the CPU build: 2048 per rank of the world); without chunked prefill at least
    max-model-len."""
    if device == "cpu":
        tokens = 2048 * max(1, world_size)
    else:
        big = gpu_memory_gib is not None and gpu_memory_gib >= BIG_GPU_GIB
        tokens = 8192 if big else 2048
    if not chunked_prefill and max_model_len:
        tokens = max(tokens, max_model_len)
    return tokens


# -- what the profiling run measures besides the weights (an estimate: vLLM measures it) -------------

NON_TORCH_GIB = 0.45  # CUDA context growth and cuBLAS workspaces (vLLM 0.6.4 on one GPU logs 0.43)
NON_TORCH_GIB_PARALLEL = 0.35  # + NCCL / custom all-reduce buffers per GPU when TP or PP > 1

ESTIMATE_NOTES = (
    "activation peak: vLLM's profile run of max-num-batched-tokens tokens ≈ tokens × (4·hidden + "
    "2·intermediate/tp) × activation bytes, plus fp32 logits for min(tokens, max-num-seqs) × vocab/tp",
    f"non-torch memory: {NON_TORCH_GIB} GiB per GPU, + {NON_TORCH_GIB_PARALLEL} GiB with TP/PP > 1 "
    "(NCCL buffers); CUDA-graph memory is not subtracted (vLLM with "
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS subtracts its own estimate, ~0.5-1 GiB, on top)",
)


def activation_peak_bytes(
    *,
    hidden: int,
    intermediate: int,
    vocab: int,
    tp: int,
    act_bytes: float,
    max_num_batched_tokens: int,
    max_num_seqs: int,
) -> int:
    """The activation peak of vLLM's profiling forward pass on one GPU (see ESTIMATE_NOTES)."""
    tp = max(1, tp)
    hidden_states = max_num_batched_tokens * (4 * hidden + 2 * intermediate / tp) * act_bytes
    logits = min(max_num_batched_tokens, max_num_seqs) * vocab * 4 / tp
    return int(hidden_states + logits)


def non_torch_bytes(tp: int, pp: int) -> int:
    """Memory vLLM counts as non-torch on one GPU (see ESTIMATE_NOTES)."""
    gib = NON_TORCH_GIB + (NON_TORCH_GIB_PARALLEL if tp * pp > 1 else 0.0)
    return int(gib * GiB)


# -- what --gpu-memory-utilization means, per vLLM release and backend ---------------------------------

# vLLM 0.34's CacheConfig (vllm/config/cache.py): `gpu_memory_utilization` defaults to None, and
# `resolved_gpu_memory_utilization` makes it 1.0 with the extensible KV cache, else
# DEFAULT_GPU_MEMORY_UTILIZATION = 0.92 (the fixed default of the 0.32 and 0.33 parsers too).
DEFAULT_UTILIZATION = 0.92
EXTENSIBLE_SINCE = (0, 34)
# VllmConfig._resolve_extensible_kv_cache (vllm/config/vllm.py, 0.34.0): on when unset only where
# `current_platform.is_cuda_alike()`, i.e. CUDA and ROCm.
EXTENSIBLE_BACKENDS = frozenset({"cuda", "rocm"})
# The backends whose worker runs `request_memory` (vllm/v1/worker/utils.py): gpu_worker.py (CUDA, ROCm)
# and xpu_worker.py. The CPU worker of 0.33+ checks nothing (0.32's refused below its utilization).
_CHECKING_BACKENDS = frozenset({"cuda", "rocm", "xpu"})


def _release(version: str | None) -> tuple[int, int] | None:
    parts = re.findall(r"\d+", version or "")[:2]
    return (int(parts[0]), int(parts[1])) if len(parts) == 2 else None


@dataclass(frozen=True)
class MemoryRule:
    """How a vLLM release on a backend treats device memory at start, for one instance's flags:
    `utilization`, the fraction it asks (the flag, else its default in this mode); `extensible_kv`,
    whether the KV cache is reserved as address space and committed after warmup from the memory then
    free (logged "Extended KV cache to N blocks"); `checks_free_memory`, whether vLLM itself refuses
    to start when free memory < ceil(utilization × total)."""

    version: str | None
    backend: str
    utilization: float
    utilization_set: bool
    extensible_kv: bool
    checks_free_memory: bool

    def describe(self) -> str:
        """One sentence: what an unset utilization means here and whether vLLM checks free memory."""
        release = f"vLLM {self.version}" if self.version else "vLLM"
        util = f"gpu-memory-utilization {self.utilization:g}" + ("" if self.utilization_set else " (unset)")
        if self.extensible_kv:
            return (
                f"{release} on {self.backend} sizes an extensible KV cache from the memory free after "
                f"warmup, capped by {util}, and does not check free memory at start"
            )
        check = "refuses to start" if self.checks_free_memory else "does not refuse to start"
        return f"{release} on {self.backend} asks {util} of each device and {check} when less is free"


def memory_rule(
    flags: Mapping[str, object],
    version: str | None,
    backend: str = "cuda",
    *,
    default_utilization: object = None,
) -> MemoryRule:
    """The memory rule of `version` (a vLLM version; None: unknown, taken as older than 0.34) on `backend`
    ("cuda", "rocm", "xpu", "cpu", …) for an instance's flags. `default_utilization`: the target
    parser's own default of --gpu-memory-utilization when known (a number up to 0.33; None in 0.34).

    From vLLM 0.34.0's source: the extensible KV cache is on when `enable-extensible-kv-cache` is unset
    on CUDA and ROCm unless kv-cache-memory-bytes, num-gpu-blocks-override or elastic EP is set
    (`VllmConfig._resolve_extensible_kv_cache`; a KV connector may turn it off too: with
    kv-transfer-config set it is taken as off unless asked for); `request_memory` skips its free-memory
    check when it is on; `CacheConfig.resolved_gpu_memory_utilization` gives an unset utilization."""
    release = _release(version)
    new = release is not None and release >= EXTENSIBLE_SINCE
    asked = flags.get("enable-extensible-kv-cache")
    extensible = False
    if new and asked is True:
        extensible = True  # vLLM refuses the start where it cannot have it
    elif new and asked is None and backend in EXTENSIBLE_BACKENDS:
        extensible = not any(
            flags.get(name) not in (None, False)
            for name in (
                "kv-cache-memory-bytes",
                "num-gpu-blocks-override",
                "enable-elastic-ep",
                "kv-transfer-config",
            )
        )
    value = flags.get("gpu-memory-utilization")
    given = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1
    if given:
        utilization = float(value)  # type: ignore[arg-type]
    elif extensible:
        utilization = 1.0
    elif isinstance(default_utilization, (int, float)) and not isinstance(default_utilization, bool):
        utilization = float(default_utilization)
    else:
        utilization = DEFAULT_UTILIZATION
    if backend == "cpu":
        checks = release is not None and release < (0, 33)
    else:
        checks = backend in _CHECKING_BACKENDS and not extensible
    return MemoryRule(version, backend, utilization, given, extensible, checks)
