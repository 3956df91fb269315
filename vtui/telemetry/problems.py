"""A diagnosed problem: what went wrong in vLLM's words or vtui's, the flag fix vtui can apply, and
why. Made by the startup diagnosis (`telemetry.diagnosis`) and the runtime KV watch
(`telemetry.kvshort`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["Problem", "flag_fix"]


@dataclass(frozen=True)
class Problem:
    kind: str
    message: str  # vLLM's own words, or vtui's summary of the figures
    fix: Mapping[str, object] | None  # flag -> value vtui can apply; None when no flag change fixes it
    explanation: str
    remedies: tuple[str, ...] = ()  # everything worth trying, in order (the fix is the first that applies)
    pids: tuple[int, ...] = ()  # processes holding the port / the GPUs, when known

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "message": self.message,
            "fix": dict(self.fix) if self.fix is not None else None,
        }


def flag_fix(**flags: object) -> Mapping[str, object]:
    """A fix's flags from keyword names (`max_num_seqs=8` -> `max-num-seqs`), read-only."""
    return MappingProxyType({k.replace("_", "-"): v for k, v in flags.items()})
