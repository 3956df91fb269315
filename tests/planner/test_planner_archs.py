"""Planner figures for well-known architectures, each derived by hand in the comments.

Notation: page = block_size × kv_heads_per_gpu × 2 (K and V) × head_dim × dtype bytes, per layer;
bytes_per_block = layers_in_widest_group × page; blocks = budget // bytes_per_block;
vLLM logs tokens = int(blocks / blocks_per_request × max_model_len).
"""

from __future__ import annotations

import json

import pytest

from vtui.planner import PlanParams, from_dict, load_model_config, plan

GiB = 1024**3

LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 8.0, "rope_type": "llama3", "original_max_position_embeddings": 8192},
}
LLAMA31_70B = {
    **LLAMA31_8B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
}
QWEN3_32B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 5120,
    "head_dim": 128,
    "intermediate_size": 25600,
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
    "sliding_window": None,
    "use_sliding_window": False,
    "max_window_layers": 64,
}
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "sliding_window": None,
    "torch_dtype": "bfloat16",
}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 40, "type": "yarn", "original_max_position_embeddings": 4096},
}
GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "hidden_size": 3584,
    "head_dim": 256,
    "intermediate_size": 14336,
    "num_hidden_layers": 42,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "vocab_size": 256000,
    "max_position_embeddings": 8192,
    "torch_dtype": "float32",
}
GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 5376,
        "head_dim": 128,
        "intermediate_size": 21504,
        "num_hidden_layers": 62,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    },
}


def _plan(cfg: dict, **kw):
    return plan(from_dict(cfg, "m"), PlanParams(**kw))


def test_llama31_8b_gqa():
    # 32 layers × 8 KV heads × 2 × 128 × 2 B = 131,072 B per token (128 KiB).
    # page = 16 × 8 × 2 × 128 × 2 = 65,536; bytes_per_block = 32 × 65,536 = 2 MiB.
    # 10 GiB / 2 MiB = 5,120 blocks; 8,192-token request = 512 blocks → 10.00x; 10 × 8,192 = 81,920 tokens.
    p = _plan(LLAMA31_8B, kv_memory_bytes=10 * GiB, max_model_len=8192)
    assert p.kv_bytes_per_token == 131072
    assert p.bytes_per_block == 2 * 1024**2
    assert (p.num_gpu_blocks, p.blocks_per_request, p.max_concurrency, p.kv_cache_tokens) == (
        5120,
        512,
        10.0,
        81920,
    )
    assert p.max_model_len_fits is True
    # llama3 rope scaling: max_position_embeddings already states 131,072.
    # 5,119 usable blocks (one is the null block) × 16 = 81,904 tokens ≤ 131,072, so 81,904 is the longest.
    assert p.estimated_max_model_len == 81904


def test_llama31_8b_weights_estimate():
    # Params: embed+head 2 × 128,256 × 4,096 = 1.051e9; per layer attn 4,096 × 128 × (32×2 + 8×2) = 41.9e6,
    # MLP 3 × 4,096 × 14,336 = 176.2e6; × 32 layers = 6.98e9; total 8.03e9 × 2 B = 14.96 GiB.
    p = _plan(LLAMA31_8B, kv_memory_bytes=GiB)
    assert p.weights_source == "estimate"
    assert p.weights_gib_per_gpu == pytest.approx(14.96, abs=0.01)
    assert _plan(
        LLAMA31_8B, kv_memory_bytes=GiB, tensor_parallel_size=2
    ).weights_gib_per_gpu == pytest.approx(7.48, abs=0.01)


def test_llama31_8b_tp_splits_kv_heads_then_replicates():
    # TP=2: 4 heads per GPU → 65,536 B/token; TP=8: 1 head → 16,384 B/token.
    # TP=16 > 8 KV heads: max(1, 8 // 16) = 1 head per GPU (replicated) → still 16,384, with a warning.
    assert _plan(LLAMA31_8B, tensor_parallel_size=2).kv_bytes_per_token == 65536
    p8 = _plan(LLAMA31_8B, tensor_parallel_size=8)
    p16 = _plan(LLAMA31_8B, tensor_parallel_size=16)
    assert p8.kv_bytes_per_token == p16.kv_bytes_per_token == 16384
    assert p16.kv_heads_per_gpu == 1 and any("replicated" in w for w in p16.warnings)


def test_llama31_70b_tp4():
    # 80 × 8 × 2 × 128 × 2 = 327,680 B/token; TP=4 → 2 heads → 81,920 B/token.
    # bytes_per_block = 80 × 16 × 2 × 2 × 128 × 2 = 1,310,720; 20 GiB / that = 16,384 blocks;
    # L = 32,768 → 2,048 blocks per request → 8.00x → 262,144 tokens.
    p = _plan(LLAMA31_70B, tensor_parallel_size=4, kv_memory_bytes=20 * GiB, max_model_len=32768)
    assert p.kv_bytes_per_token == 81920
    assert (p.num_gpu_blocks, p.max_concurrency, p.kv_cache_tokens) == (16384, 8.0, 262144)


def test_qwen3_32b_fp8_kv_and_no_sliding():
    # head_dim 128 given; 64 × 8 × 2 × 128 × 2 B = 262,144 B/token; fp8 KV halves it: 131,072.
    # use_sliding_window false → all layers full attention, one group.
    p = _plan(QWEN3_32B)
    assert p.kv_bytes_per_token == 262144 and p.kv_groups == ("full:64",) and p.max_model_len == 40960
    assert _plan(QWEN3_32B, kv_cache_dtype="fp8").kv_bytes_per_token == 131072
    assert _plan(QWEN3_32B, kv_cache_dtype="fp8_e5m2").kv_dtype_bytes == 1


def test_mixtral_weights_and_kv():
    # KV like Llama-8B: 131,072 B/token. Params: 32 × (41.9e6 attn + 8 experts × 176.2e6 + router 32,768)
    # + 2 × 32,000 × 4,096 = 46.70e9 → × 2 B = 86.99 GiB; AWQ: 46.44e9 linear × 0.52 + 0.262e9 embed × 2 = 24.67e9 B = 22.98 GiB.
    p = _plan(MIXTRAL_8X7B)
    assert p.kv_bytes_per_token == 131072
    assert p.weights_gib_per_gpu == pytest.approx(86.99, abs=0.05)
    assert _plan(MIXTRAL_8X7B, quantization="awq").weights_gib_per_gpu == pytest.approx(22.98, abs=0.02)


def test_deepseek_v3_mla_not_split_by_tp():
    # MLA: one latent of 512 + 64 = 576 elements per token per layer, × 2 B = 1,152; × 61 = 70,272 B/token,
    # the same on every GPU whatever the TP. fp8 KV: 576 × 61 = 35,136.
    # Block 64: bytes_per_block = 61 × 64 × 1,152 = 4,497,408; 40 GiB // that = 9,549 blocks;
    # L = 163,840 (yarn: not multiplied again) = 2,560 blocks → 3.73x → 9,549 × 64 = 611,136 tokens.
    p = _plan(DEEPSEEK_V3, tensor_parallel_size=8, block_size=64, kv_memory_bytes=40 * GiB)
    assert p.kv_bytes_per_token == 70272 and p.kv_heads_per_gpu == 1
    assert p.max_model_len == 163840
    assert (p.num_gpu_blocks, p.blocks_per_request, p.kv_cache_tokens) == (9549, 2560, 611136)
    assert p.max_concurrency == pytest.approx(9549 / 2560, abs=1e-4)
    assert _plan(DEEPSEEK_V3, kv_cache_dtype="fp8").kv_bytes_per_token == 35136
    assert not any("replicated" in w for w in p.warnings)


def test_gemma2_alternating_sliding_window():
    # 42 layers alternate sliding (even) / full: 21 + 21 → two groups of 21 layers.
    # float32 checkpoint, dtype auto → bfloat16 (vLLM downcasts). page = 16 × 8 × 2 × 256 × 2 = 131,072;
    # bytes_per_block = 21 × 131,072 = 2,752,512; 10 GiB // that = 3,900 blocks.
    # L = 8,192, in-flight = 1 batch × 2,048 (async off): sliding = cdiv(min(4,095 + 2,048, 8,192), 16) + 1
    # = 384 + 1 = 385, full = 512 → 897 blocks per request → 4.3478x → int(3,900 × 8,192 / 897) = 35,617.
    p = _plan(GEMMA2_9B, kv_memory_bytes=10 * GiB, max_num_batched_tokens=2048, async_scheduling=False)
    assert p.model_dtype == "bfloat16" and p.sliding_window == 4096
    assert p.kv_groups == ("sliding:21", "full:21")
    assert (p.bytes_per_block, p.num_gpu_blocks, p.blocks_per_request) == (2752512, 3900, 897)
    assert p.kv_cache_tokens == 35617
    # Without the hybrid manager every layer keeps all tokens: 42 layers per block, 512 blocks/request.
    q = _plan(GEMMA2_9B, kv_memory_bytes=10 * GiB, hybrid_kv_cache_manager=False)
    assert q.kv_groups == ("full:42",) and q.blocks_per_request == 512


def test_gemma3_nested_text_config_5_to_1():
    # text_config is read; layers (i+1) % 6 == 0 are full: 10 full, 52 sliding (window 1,024).
    # group_size = 10 → 1 full group + cdiv(52, 10) = 6 sliding groups (widest: 10 layers). Gemma-3's 131,072 is not rescaled.
    # page = 16 × 16 × 2 × 128 × 2 = 131,072; bytes_per_block = 10 × 131,072 = 1,310,720;
    # 20 GiB → 16,384 blocks. L = 32,768, in-flight 2,048: sliding = cdiv(1,023 + 2,048, 16) + 1 = 193;
    # per request = 2,048 + 6 × 193 = 3,206 → int(16,384 × 32,768 / 3,206) = 167,458 tokens.
    cfg = from_dict(GEMMA3_27B, "gemma3")
    assert cfg.num_layers == 62 and cfg.max_position_embeddings == 131072 and cfg.sliding_layers == 52
    p = plan(
        cfg,
        PlanParams(
            kv_memory_bytes=20 * GiB, max_model_len=32768, max_num_batched_tokens=2048, async_scheduling=False
        ),
    )
    # layers[i::6] of the 52 sliding ones: 9, 9, 9, 9, 8, 8 real layers (padded to 10 in vLLM's table).
    assert p.kv_groups == ("sliding:9",) * 4 + ("sliding:8",) * 2 + ("full:10",)
    assert (p.num_gpu_blocks, p.blocks_per_request, p.kv_cache_tokens) == (16384, 3206, 167458)


def test_max_model_len_that_does_not_fit():
    # Llama-8B, 1 GiB: 512 blocks (2 MiB each), 511 usable → 511 × 16 = 8,176 tokens is the longest;
    # a 16,384-token request needs 1,024 blocks → vLLM refuses to start.
    p = _plan(LLAMA31_8B, kv_memory_bytes=GiB, max_model_len=16384)
    assert p.max_model_len_fits is False and p.estimated_max_model_len == 8176
    assert any("does not fit" in w for w in p.warnings)


def test_estimated_budget_from_gpu_memory():
    # 80 GiB × 0.9 = 72 GiB − 14.96 weights − activation − 0.45 non-torch: between 50 and 57 GiB.
    p = _plan(LLAMA31_8B, gpu_memory_gib=80, gpu_memory_utilization=0.9, max_model_len=8192)
    assert p.kv_budget_source == "estimate" and 50 < p.available_kv_gib < 57
    assert p.kv_cache_tokens == p.num_gpu_blocks * 16  # 8,192 is a whole number of blocks


def test_hf_cache_snapshot_and_weight_files(tmp_path, monkeypatch):
    # A cached snapshot resolves through refs/main; a safetensors index states the exact weight size.
    repo = tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "abc123"
    repo.mkdir(parents=True)
    (repo.parent.parent / "refs").mkdir()
    (repo.parent.parent / "refs" / "main").write_text("abc123")
    (repo / "config.json").write_text(json.dumps(LLAMA31_8B))
    (repo / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16060522496}}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    cfg = load_model_config("meta-llama/Llama-3.1-8B")
    assert cfg.weights_file_bytes == 16060522496
    p = plan(cfg, PlanParams(kv_memory_bytes=GiB))
    assert p.weights_source == "files" and p.weights_gib_per_gpu == pytest.approx(16060522496 / GiB, abs=1e-3)


def test_missing_model_never_downloads(tmp_path, monkeypatch):
    from vtui.planner import ModelConfigError

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelConfigError, match="never downloads"):
        load_model_config("org/not-cached")
