"""Pending flag edits: per instance, the flags as edited in a dashboard's flag editor and neither applied
(a restart with them) nor discarded. The session's owner keeps them (the session supervisor persists them
with its state), so a dashboard reopened, or a second one, shows the same `[+] unsaved` edits.

Each edit is kept with its base: the flags it was made from. When the instance's applied flags change
under it (another client restarted it with other flags), the edit is rebased (`rebase`): only the user's
own changes (the edit against its base) are re-applied onto the new flags, so applying it later does not
revert the other client's change. A flag both changed keeps the user's value and is kept as a
`FlagConflict`, which the flag editor shows.

Values are stored masked (`core.masking`, as every flag vtui writes or sends): a secret typed into the
editor is never kept; a MASK value means "the secret as it runs".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeGuard

from vtui.core.masking import masked
from vtui.core.model import FlagValue

__all__ = ["FlagConflict", "PendingEdits", "Rebased", "check_edits", "decode_conflicts", "rebase"]

MAX_INSTANCES = 1000  # a bound on what a client may make the supervisor hold (and write)
MAX_FLAGS = 500


def check_edits(flags: object, what: str = "flags") -> dict[str, FlagValue]:
    """`flags` as an instance's edits (name -> value), or ValueError naming what is wrong."""
    if not isinstance(flags, Mapping):
        raise ValueError(f"{what}: expected an object of flag names to values, got {type(flags).__name__}")
    if len(flags) > MAX_FLAGS:
        raise ValueError(f"{what}: {len(flags)} flags, at most {MAX_FLAGS}")
    out: dict[str, FlagValue] = {}
    for name, value in flags.items():
        if not isinstance(name, str) or not name or name.startswith("-"):
            raise ValueError(f"{what}: {name!r} is not a flag name (no leading --)")
        if not _is_value(value):
            raise ValueError(f"{what}.{name}: {value!r} is not a flag value")
        out[name] = list(value) if isinstance(value, list) else value
    return out


def _is_value(value: object) -> TypeGuard[FlagValue]:
    return isinstance(value, bool | int | float | str) or (
        isinstance(value, list) and all(isinstance(v, bool | int | float | str) for v in value)
    )


@dataclass(frozen=True)
class FlagConflict:
    """A flag the user's edit and the flags applied meanwhile both changed: the user's value is kept.
    None for a value: the flag unset."""

    flag: str
    mine: FlagValue | None  # the edit's value (kept)
    theirs: FlagValue | None  # the value applied meanwhile (the instance runs with it)
    was: FlagValue | None  # the value both started from

    def text(self) -> str:
        def show(value: FlagValue | None) -> str:
            if value is None:
                return "unset"
            return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)

        return (
            f"--{self.flag}: your {show(self.mine)} kept; it was restarted meanwhile with "
            f"{show(self.theirs)} (both changed it from {show(self.was)})"
        )

    def to_dict(self) -> dict[str, object]:
        return {"flag": self.flag, "mine": self.mine, "theirs": self.theirs, "was": self.was}

    @staticmethod
    def from_dict(data: object) -> FlagConflict:
        if not isinstance(data, Mapping) or not isinstance(data.get("flag"), str):
            raise ValueError(f"a flag conflict: expected an object with a flag, got {data!r}")
        values = [data.get(k) for k in ("mine", "theirs", "was")]
        if not all(v is None or _is_value(v) for v in values):
            raise ValueError(f"conflict of --{data['flag']}: {values!r} are not flag values")
        return FlagConflict(data["flag"], *values)


def decode_conflicts(data: object) -> tuple[FlagConflict, ...]:
    """Conflicts as sent on the wire (`FlagConflict.to_dict`'s); what does not read as one is left out."""
    out = []
    for item in data if isinstance(data, list) else ():
        try:
            out.append(FlagConflict.from_dict(item))
        except ValueError:
            continue
    return tuple(out)


@dataclass(frozen=True)
class Rebased:
    flags: dict[str, FlagValue]  # the new flags with the user's own changes on them
    conflicts: tuple[FlagConflict, ...]  # the flags both changed (the user's value kept), by name


def rebase(
    edit: Mapping[str, FlagValue], base: Mapping[str, FlagValue], onto: Mapping[str, FlagValue]
) -> Rebased:
    """The user's changes (`edit` against `base`, the flags it was made from: values set, changed or
    unset) re-applied onto `onto`, the flags applied since. What only the other side changed stays as
    `onto` has it; a flag both changed to different values keeps the edit's value and is a conflict."""
    out = dict(onto)
    conflicts = []
    for name in [*base, *(n for n in edit if n not in base)]:
        mine, was, theirs = edit.get(name), base.get(name), onto.get(name)
        if mine == was:
            continue  # not the user's change
        if theirs != was and theirs != mine:
            conflicts.append(FlagConflict(name, mine, theirs, was))
        if mine is None:
            out.pop(name, None)
        else:
            out[name] = list(mine) if isinstance(mine, list) else mine
    return Rebased(out, tuple(sorted(conflicts, key=lambda c: c.flag)))


@dataclass
class _Kept:
    flags: dict[str, FlagValue]  # the whole set as edited (masked)
    base: dict[str, FlagValue] | None  # the flags it was made from (masked); None: not known
    conflicts: tuple[FlagConflict, ...] = ()


class PendingEdits:
    """instance -> its edited flags (the whole set as edited, masked), with the flags it was made from
    and the conflicts of its rebases. Not thread-safe: the owner's loop.

    `on_change(name)` (when set) is called after each change of what is kept for `name`, including a
    rebase (the session supervisor persists and broadcasts them)."""

    def __init__(self, on_change: Callable[[str], None] | None = None) -> None:
        self._edits: dict[str, _Kept] = {}
        self.on_change = on_change

    def set(
        self,
        name: str,
        flags: Mapping[str, FlagValue] | None,
        base: Mapping[str, FlagValue] | None = None,
    ) -> bool:
        """Keep `flags` as `name`'s edits, made from the flags `base` (None: clear them); True when that
        changed what is kept. Conflicts of an earlier rebase stay while the edit still holds the value
        kept and the base still the other's."""
        if flags is None:
            return self._changed(name, self._edits.pop(name, None) is not None)
        edits = masked(check_edits(flags, f"edits of {name}"))
        based = masked(check_edits(base, f"base of the edits of {name}")) if base is not None else None
        old = self._edits.get(name)
        if old is None and len(self._edits) >= MAX_INSTANCES:
            raise ValueError(f"edits of {name}: edits of {MAX_INSTANCES} instances are kept already")
        conflicts = tuple(
            c
            for c in (old.conflicts if old is not None else ())
            if edits.get(c.flag) == c.mine and (based is None or based.get(c.flag) == c.theirs)
        )
        new = _Kept(edits, based if based is not None else (old.base if old is not None else None), conflicts)
        if old == new:
            return False
        self._edits[name] = new
        return self._changed(name, True)

    def rebase(self, name: str, applied: Mapping[str, FlagValue]) -> bool:
        """`name` runs with the flags `applied` from now on: its kept edit, made from other flags, keeps
        only the user's own changes on them (`rebase`). An edit left with no change of its own is
        dropped. True when what is kept changed."""
        kept = self._edits.get(name)
        now = masked(applied)
        if kept is None or kept.base is None or kept.base == now:
            return False
        done = rebase(kept.flags, kept.base, now)
        if done.flags == now:
            del self._edits[name]
            return self._changed(name, True)
        ours = {c.flag for c in done.conflicts}
        still = tuple(c for c in kept.conflicts if c.flag not in ours and done.flags.get(c.flag) == c.mine)
        conflicts = tuple(sorted((*still, *done.conflicts), key=lambda c: c.flag))
        self._edits[name] = _Kept(done.flags, now, conflicts)
        return self._changed(name, True)

    def _changed(self, name: str, changed: bool) -> bool:
        if changed and self.on_change is not None:
            self.on_change(name)
        return changed

    def get(self, name: str) -> dict[str, FlagValue] | None:
        kept = self._edits.get(name)
        return _copy(kept.flags) if kept is not None else None

    def base(self, name: str) -> dict[str, FlagValue] | None:
        """The flags `name`'s edit was made from (or rebased onto last)."""
        kept = self._edits.get(name)
        return _copy(kept.base) if kept is not None and kept.base is not None else None

    def conflicts(self, name: str) -> tuple[FlagConflict, ...]:
        kept = self._edits.get(name)
        return kept.conflicts if kept is not None else ()

    def snapshot(self) -> dict[str, dict[str, FlagValue]]:
        """A copy: instance -> its edits."""
        return {name: _copy(kept.flags) for name, kept in self._edits.items()}

    def conflicts_snapshot(self) -> dict[str, tuple[FlagConflict, ...]]:
        """instance -> the conflicts of its edits' rebases (only instances that have some)."""
        return {name: kept.conflicts for name, kept in self._edits.items() if kept.conflicts}

    def state(self) -> dict[str, dict[str, object]]:
        """What a successor takes back (`load`): instance -> its edits, their base and conflicts."""
        return {
            name: {
                "flags": _copy(kept.flags),
                "base": _copy(kept.base) if kept.base is not None else None,
                "conflicts": [c.to_dict() for c in kept.conflicts],
            }
            for name, kept in self._edits.items()
        }

    def load(self, data: object) -> list[str]:
        """Take what a predecessor persisted (`state()`'s shape, or `snapshot()`'s of an older vtui:
        edits with no base); returns the problems of what was left out (a state file edited by hand, or
        from another version). `on_change` is not called."""
        problems: list[str] = []
        if not isinstance(data, Mapping):
            return [f"pending edits: expected an object, got {type(data).__name__}"] if data else []
        on_change, self.on_change = self.on_change, None
        try:
            for name, entry in data.items():
                try:
                    self._load_one(name, entry)
                except ValueError as exc:
                    problems.append(str(exc))
        finally:
            self.on_change = on_change
        return problems

    def _load_one(self, name: object, entry: object) -> None:
        if not isinstance(name, str):
            raise ValueError(f"pending edits: {name!r} is not an instance name")
        if isinstance(entry, Mapping) and isinstance(entry.get("flags"), Mapping):
            flags, base = entry["flags"], entry.get("base")
            conflicts = tuple(FlagConflict.from_dict(c) for c in entry.get("conflicts") or ())
        else:  # an older vtui's: the edits alone
            flags, base, conflicts = entry, None, ()
        self.set(name, flags, base)
        self._edits[name].conflicts = conflicts

    def __bool__(self) -> bool:
        return bool(self._edits)


def _copy(flags: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
    return {k: list(v) if isinstance(v, list) else v for k, v in flags.items()}
