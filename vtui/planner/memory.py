"""Estimates of what sits in GPU memory besides the KV cache: weights, the activation peak of vLLM's
profiling run, and non-torch overhead. These are estimates (vLLM measures them at startup); every
assumption is listed in `ASSUMPTIONS` and repeated in `vtui plan --json`.
"""

from __future__ import annotations

from vtui.planner.config import ModelConfig

GiB = 1024**3

DTYPE_BYTES = {
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
# Weight bytes per parameter of linear layers under a quantization method (int4 with group-128
# scales and zeros is ~0.5 + 2.5/128 bytes); embeddings and the LM head stay in the model dtype.
QUANT_LINEAR_BYTES = {
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

NON_TORCH_GIB_TP1 = 0.25  # CUDA context growth, cuBLAS workspaces during init (measured ~0.1–0.4)
NON_TORCH_GIB_PER_TP = 0.5  # NCCL / custom all-reduce buffers per GPU when TP or PP > 1
CUDAGRAPH_GIB = 0.5  # graph pools, profiled and subtracted since vLLM 0.21 unless --enforce-eager
ACTIVATION_FACTOR = 2.0  # live intermediate buffers at the profiling peak vs one layer's outputs

ASSUMPTIONS = (
    "weights: exact file size when the checkpoint is on disk, else a parameter count from config.json "
    "× bytes per parameter (dtype; AWQ/GPTQ int4 ≈ 0.52 B, fp8 1 B for linear layers; embeddings keep "
    "the model dtype); split evenly over tensor × pipeline parallel GPUs",
    f"activation peak: vLLM's profile run of max-num-batched-tokens tokens ≈ tokens × (3·hidden + "
    f"(q+k+v)/tp + 2·intermediate/tp) × activation bytes × {ACTIVATION_FACTOR}, plus fp32 logits for "
    "max-num-seqs × vocab/tp",
    f"non-torch overhead: {NON_TORCH_GIB_TP1} GiB per GPU, {NON_TORCH_GIB_PER_TP} GiB with TP/PP > 1 "
    f"(NCCL buffers); CUDA graphs {CUDAGRAPH_GIB} GiB unless enforce-eager",
    "KV budget: gpu-memory × utilization − weights − activation peak − non-torch − CUDA graphs, "
    "unless given (--kv-memory-gib / --kv-memory-bytes / a vLLM log), which is then exact",
)


def dtype_bytes(name: str) -> float:
    key = name.lower().replace("torch.", "")
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[key]


def resolve_model_dtype(model: ModelConfig, dtype: str = "auto") -> str:
    """vLLM's `--dtype auto`: the checkpoint's dtype, with float32 checkpoints downcast to bfloat16."""
    if dtype and dtype != "auto":
        return {"half": "float16", "float": "float32"}.get(dtype, dtype)
    return "bfloat16" if model.dtype in ("float32", "float") else model.dtype


def resolve_kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> float:
    """`--kv-cache-dtype auto` = the model dtype; fp8* = 1 byte."""
    if not kv_cache_dtype or kv_cache_dtype == "auto":
        return dtype_bytes(model_dtype)
    if kv_cache_dtype.startswith("fp8"):
        return 1
    return dtype_bytes(kv_cache_dtype)


def param_counts(m: ModelConfig) -> tuple[int, int]:
    """(linear-layer parameters, embedding + LM-head parameters) estimated from the config."""
    h, L = m.hidden_size, m.num_layers
    embed = m.vocab_size * h * (1 if m.tie_word_embeddings else 2)
    if m.is_mla:
        heads = m.num_attention_heads
        nope, rope = m.qk_nope_head_dim or 128, m.qk_rope_head_dim or 64
        v = m.v_head_dim or 128
        q = (
            h * m.q_lora_rank + m.q_lora_rank * heads * (nope + rope)
            if m.q_lora_rank
            else h * heads * (nope + rope)
        )
        attn = q + h * (m.kv_lora_rank + rope) + m.kv_lora_rank * heads * (nope + v) + heads * v * h
    else:
        attn = h * m.head_dim * (m.num_attention_heads * 2 + m.num_kv_heads * 2)
    dense_mlp = 3 * h * m.intermediate_size
    if m.num_experts:
        expert = 3 * h * (m.moe_intermediate_size or m.intermediate_size)
        moe_mlp = expert * (m.num_experts + m.num_shared_experts) + h * m.num_experts
        dense_layers = min(m.first_k_dense_layers, L)
        mlp = dense_layers * dense_mlp + (L - dense_layers) * moe_mlp
    else:
        mlp = L * dense_mlp
    return L * attn + mlp, embed


def weights_bytes(m: ModelConfig, model_dtype: str, quantization: str | None = None) -> tuple[int, str]:
    """Total weight bytes and how they were obtained: "files" (checkpoint size on disk, rescaled when
    vLLM casts an unquantized checkpoint to another dtype) or "estimate" (parameter count)."""
    quant = (quantization or m.quantization or "").lower() or None
    if m.weights_file_bytes and (quantization is None or quantization == m.quantization):
        if m.quantization:
            return m.weights_file_bytes, "files"
        try:
            scale = dtype_bytes(model_dtype) / dtype_bytes(m.dtype)
        except ValueError:
            scale = 1.0
        return int(m.weights_file_bytes * scale), "files"
    linear, embed = param_counts(m)
    emb_bytes = dtype_bytes(model_dtype)
    lin_bytes = QUANT_LINEAR_BYTES.get(quant, emb_bytes) if quant else emb_bytes
    return int(linear * lin_bytes + embed * emb_bytes), "estimate"


def activation_bytes(
    m: ModelConfig, *, tp: int, act_bytes: float, max_num_batched_tokens: int, max_num_seqs: int
) -> int:
    """Activation peak of vLLM's profiling forward pass (see ASSUMPTIONS)."""
    inter = m.moe_intermediate_size * max(1, m.num_experts_per_tok) if m.num_experts else m.intermediate_size
    qkv = (m.num_attention_heads + 2 * m.num_kv_heads) * m.head_dim
    per_token = 3 * m.hidden_size + qkv / tp + 2 * inter / tp
    hidden = max_num_batched_tokens * per_token * act_bytes * ACTIVATION_FACTOR
    logits = max_num_seqs * (m.vocab_size / tp) * 4
    return int(hidden + logits)


def overhead_bytes(*, tp: int, pp: int, enforce_eager: bool) -> tuple[int, int]:
    """(non-torch overhead, CUDA-graph memory) per GPU (see ASSUMPTIONS)."""
    non_torch = NON_TORCH_GIB_PER_TP if tp * pp > 1 else NON_TORCH_GIB_TP1
    return int(non_torch * GiB), 0 if enforce_eager else int(CUDAGRAPH_GIB * GiB)
