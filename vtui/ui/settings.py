"""The user's UI settings: `settings.toml` next to `keys.toml` in vtui's config dir, table `[ui]`.

    [ui]
    confirm = false   # stop and restart without asking (default: ask)

A user's preference, not a property of a layout (a layout is shared, your habits are not). Unknown keys
and wrong types are reported (the App shows them as warnings) and the defaults kept.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

from vtui.core import paths

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class UiSettings:
    confirm: bool = True  # ask before stop and restart


def settings_file() -> Path:
    return paths.config_dir() / "settings.toml"


def load_settings(path: Path | None = None) -> tuple[UiSettings, list[str]]:
    """The settings and a list of problems (bad file, unknown key, wrong type)."""
    path = path or settings_file()
    if not path.exists():
        return UiSettings(), []
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return UiSettings(), [f"{path}: {exc}"]
    table = doc.get("ui", {})
    if not isinstance(table, dict):
        return UiSettings(), [f"{path}: [ui] must be a table"]
    known = {f.name: f for f in fields(UiSettings)}
    settings, problems = UiSettings(), []
    for key, value in table.items():
        if key not in known:
            problems.append(f"{path}: ui.{key}: unknown setting (known: {', '.join(sorted(known))})")
        elif not isinstance(value, bool):
            problems.append(f"{path}: ui.{key}: expected true or false")
        else:
            settings = replace(settings, **{key: value})
    return settings, problems
