"""Estimates of what sits in GPU memory besides the KV cache: weights, the activation peak of vLLM's
profiling run, and non-torch overhead. These are estimates (vLLM measures them at startup); every
assumption is listed in `ASSUMPTIONS` and repeated in `vtui plan --json`.
"""

from __future__ import annotations

from vtui.core import vllm_memory
from vtui.core.vllm_memory import DTYPE_BYTES as DTYPE_BYTES  # re-exported
from vtui.core.vllm_memory import QUANT_LINEAR_BYTES as QUANT_LINEAR_BYTES
from vtui.core.vllm_memory import GiB as GiB
from vtui.core.vllm_memory import dtype_bytes as dtype_bytes
from vtui.planner.config import ModelConfig

ASSUMPTIONS = (
    "weights: exact file size when the checkpoint is on disk, else a parameter count from config.json "
    "× bytes per parameter (dtype; AWQ/GPTQ int4 ≈ 0.52 B, fp8 1 B for linear layers; embeddings keep "
    "the model dtype); split evenly over tensor × pipeline parallel GPUs",
    *vllm_memory.ESTIMATE_NOTES,
    "defaults: the flags' defaults from vLLM's own schema (core.flagspec: gpu-memory-utilization 0.92, ...); "
    "max-num-seqs / max-num-batched-tokens as vLLM picks them by GPU size (1024 / 8192 from 70 GiB, "
    "else 256 / 2048)",
    "KV budget: gpu-memory × utilization − weights − activation peak − non-torch, "
    "unless given (--kv-memory-gib / --kv-memory-bytes / a vLLM log), which is then exact",
)


def resolve_model_dtype(model: ModelConfig, dtype: str = "auto") -> str:
    """vLLM's `--dtype` for this checkpoint (core.vllm_memory.resolve_model_dtype)."""
    return vllm_memory.resolve_model_dtype(model.dtype, dtype)


def resolve_kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> float:
    """`--kv-cache-dtype auto` = the model dtype; fp8* = 1 byte."""
    return vllm_memory.kv_dtype_bytes(kv_cache_dtype, model_dtype)


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
        rank = m.kv_lora_rank or 0
        attn = q + h * (rank + rope) + rank * heads * (nope + v) + heads * v * h
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
    lin_bytes = vllm_memory.linear_bytes_per_param(quant, m.quant_bits) or emb_bytes
    return int(linear * lin_bytes + embed * emb_bytes), "estimate"


def activation_bytes(
    m: ModelConfig, *, tp: int, act_bytes: float, max_num_batched_tokens: int, max_num_seqs: int
) -> int:
    """Activation peak of vLLM's profiling forward pass (core.vllm_memory; MoE: the active experts)."""
    inter = m.moe_intermediate_size * max(1, m.num_experts_per_tok) if m.num_experts else m.intermediate_size
    return vllm_memory.activation_peak_bytes(
        hidden=m.hidden_size,
        intermediate=inter,
        vocab=m.vocab_size,
        tp=tp,
        act_bytes=act_bytes,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
    )
