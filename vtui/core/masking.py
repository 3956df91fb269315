"""Secret flags and their masking: which flags never appear on a command line or in a record, and the
flags as they may be written or shown. Stdlib only and tiny: `vtui ps` imports it (not the model)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

__all__ = ["MASK", "SECRET_FLAGS", "masked"]

# Flags whose value must never appear on a command line (readable by every local user in `ps`).
SECRET_FLAGS: Mapping[str, str] = MappingProxyType({"api-key": "VLLM_API_KEY"})
MASK = "***"


V = TypeVar("V")


def masked(flags: Mapping[str, V]) -> dict[str, V | str]:
    """The flags with every secret value (api-key) replaced by MASK: what may be written or shown."""
    return {k: (MASK if k in SECRET_FLAGS else v) for k, v in flags.items()}
