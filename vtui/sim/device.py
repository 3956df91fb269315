"""Hook for a later real-GPU mode (`--sim-device cuda`): hold real CUDA memory for the weights and the KV
cache so NVML sees the instance like a real vLLM. A no-op (returns None) when torch or CUDA is missing."""

from __future__ import annotations

import importlib
from typing import Any


def hold_cuda_memory(nbytes: int, devices: list[int]) -> list[Any] | None:
    """Allocate `nbytes` on each of `devices` (local CUDA indices); None when torch/CUDA is unavailable."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    held = []
    for index in devices:
        held.append(torch.empty(int(nbytes), dtype=torch.uint8, device=f"cuda:{index}"))
    return held
