"""Writing the flags an instance runs with into its layout file: `restart --save` and `tune --save` (the
command that sees the restart end, or the session supervisor when a tune ends with no client following).

The file is read again as it is now, not the copy read before the restart, so edits made to it while the
instance started are kept; its secret flags stay the file's; every flag is checked against the schema of
the vLLM the instance runs (`flagschema.save_check`), and a flag that vLLM would reject refuses the save;
the save itself keeps every comment or refuses (`layouts.save_layout`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vtui.core.model import SECRET_FLAGS


@dataclass(frozen=True)
class FlagSave:
    """What came of one save: the file written, or why not (each a line: "not saved: …")."""

    saved: Path | None
    problems: tuple[str, ...] = ()


def save_instance_flags(path: Path | None, name: str, flags: Mapping[str, object]) -> FlagSave:
    """Write `name`'s `flags` into the layout file at `path` (see the module docstring); None: the
    session has no layout file (a layout given only in memory)."""
    from vtui.layouts import LayoutError, load_layout, save_layout
    from vtui.telemetry.flagschema import layout_flags, save_check

    if path is None:
        return FlagSave(None, (f"{name}'s session has no layout file: not saved",))
    try:
        current = load_layout(path, flags=layout_flags(path))
        if name not in current.names():
            return FlagSave(None, (f"{path} has no instance {name} any more: not saved",))
        own = current.instance(name)
        kept: dict[str, Any] = {k: v for k, v in own.flags.items() if k in SECRET_FLAGS}
        plain: dict[str, Any] = {k: v for k, v in flags.items() if k not in SECRET_FLAGS}
        changed = current.replace_instance(replace(own, flags={**plain, **kept}))
        check = save_check(changed)
        if check.problems:
            return FlagSave(None, tuple(f"{path} (not saved): {p}" for p in check.problems))
        return FlagSave(save_layout(changed, flags=check.flags))
    except (OSError, LayoutError) as exc:
        return FlagSave(None, (f"{path} was not saved: {exc}",))
