"""Piping into `head` is normal use: a reader that goes away ends any command quietly (no traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vtui.cli import EXIT_BROKEN_PIPE

FIXTURES = Path(__file__).resolve().parent / "telemetry" / "fixtures"
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


def _into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `vtui ARGS` with stdout a pipe whose reader is already gone (`| head -1` at its worst)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "vtui", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize("kind", ["metrics", "plan", "check", "help"])
def test_a_closed_pipe_ends_quietly(kind: str, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY), encoding="utf-8")
    args = {
        "metrics": ["metrics", str(FIXTURES / "metrics_busy.txt")],
        "plan": ["plan", str(tmp_path), "--gpu-memory-gib", "80"],
        "check": ["check", "demo"],
        "help": ["--help"],
    }[kind]
    done = _into_a_closed_pipe(*args)
    assert done.stderr == ""
    assert done.returncode == EXIT_BROKEN_PIPE
