"""Pending flag edits: per instance, the flags as edited in a dashboard's flag editor and neither applied
(a restart with them) nor discarded. The session's owner keeps them (the session supervisor persists them
with its state), so a dashboard reopened, or a second one, shows the same `[+] unsaved` edits.

Values are stored masked (`core.masking`, as every flag vtui writes or sends): a secret typed into the
editor is never kept; a MASK value means "the secret as it runs".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vtui.core.masking import masked
from vtui.core.model import FlagValue

__all__ = ["PendingEdits", "check_edits"]

MAX_INSTANCES = 1000  # a bound on what a client may make the supervisor hold (and write)
MAX_FLAGS = 500


def check_edits(flags: Any, what: str = "flags") -> dict[str, FlagValue]:
    """`flags` as an instance's edits (name -> value), or ValueError naming what is wrong."""
    if not isinstance(flags, Mapping):
        raise ValueError(f"{what}: expected an object of flag names to values, got {type(flags).__name__}")
    if len(flags) > MAX_FLAGS:
        raise ValueError(f"{what}: {len(flags)} flags, at most {MAX_FLAGS}")
    out: dict[str, FlagValue] = {}
    for name, value in flags.items():
        if not isinstance(name, str) or not name or name.startswith("-"):
            raise ValueError(f"{what}: {name!r} is not a flag name (no leading --)")
        ok = isinstance(value, bool | int | float | str) or (
            isinstance(value, list) and all(isinstance(v, bool | int | float | str) for v in value)
        )
        if not ok:
            raise ValueError(f"{what}.{name}: {value!r} is not a flag value")
        out[name] = list(value) if isinstance(value, list) else value
    return out


class PendingEdits:
    """instance -> its edited flags (the whole set as edited, masked). Not thread-safe: the owner's loop."""

    def __init__(self) -> None:
        self._edits: dict[str, dict[str, FlagValue]] = {}

    def set(self, name: str, flags: Mapping[str, FlagValue] | None) -> bool:
        """Keep `flags` as `name`'s edits (None: clear them); True when that changed what is kept."""
        if flags is None:
            return self._edits.pop(name, None) is not None
        edits = masked(check_edits(flags, f"edits of {name}"))
        if self._edits.get(name) == edits:
            return False
        if name not in self._edits and len(self._edits) >= MAX_INSTANCES:
            raise ValueError(f"edits of {name}: edits of {MAX_INSTANCES} instances are kept already")
        self._edits[name] = edits
        return True

    def get(self, name: str) -> dict[str, FlagValue] | None:
        edits = self._edits.get(name)
        return _copy(edits) if edits is not None else None

    def snapshot(self) -> dict[str, dict[str, FlagValue]]:
        """A copy: instance -> its edits."""
        return {name: _copy(flags) for name, flags in self._edits.items()}

    def load(self, data: Any) -> list[str]:
        """Take what a predecessor persisted (`snapshot()`'s shape); returns the problems of what was
        left out (a state file edited by hand, or from another version)."""
        problems: list[str] = []
        if not isinstance(data, Mapping):
            return [f"pending edits: expected an object, got {type(data).__name__}"] if data else []
        for name, flags in data.items():
            try:
                if not isinstance(name, str):
                    raise ValueError(f"pending edits: {name!r} is not an instance name")
                self.set(name, flags)
            except ValueError as exc:
                problems.append(str(exc))
        return problems

    def __bool__(self) -> bool:
        return bool(self._edits)


def _copy(flags: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
    return {k: list(v) if isinstance(v, list) else v for k, v in flags.items()}
