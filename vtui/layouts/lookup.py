"""Which layout file a command means: a path, a shipped layout by name, or the last session's.

One record of the last-used session (`last_session` in the state dir) is written and read by the dashboard
and every CLI command, so `vtui ps` after the dashboard finds the dashboard's layout and vice versa.
Shipped layouts are the repository's `layouts/*.toml` (one copy; a wheel installs them as the package data
`vtui/layouts/builtin/`, see setup.py) and can be named wherever a layout path is taken (`vtui up demo`); a
file of that name in the current directory wins.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

from vtui.core import paths
from vtui.core.atomic import atomic_write_text
from vtui.layouts.errors import NoLayoutError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "BUILTIN_DIR",
    "DEMO",
    "NoLayoutError",
    "builtin_layout",
    "builtin_names",
    "default_layout",
    "last_layout",
    "remember_last",
    "resolve_layout_arg",
    "split_layout_args",
]


def _shipped_dir() -> Path:
    """Where the shipped layouts are: an installed wheel's package data (`vtui/layouts/builtin/`, which
    the build maps from the repository's `layouts/`), else the checkout's `layouts/` (an editable
    install, or a clone on PYTHONPATH: the package folder has no `builtin/`)."""
    here = Path(__file__).resolve().parent
    packaged = here / "builtin"
    return packaged if packaged.is_dir() else here.parent.parent / "layouts"


BUILTIN_DIR = _shipped_dir()
DEMO = "demo"  # the shipped layout `vtui` opens when given nothing and no session was used before
_LAST = "last_session"


def builtin_names() -> list[str]:
    """The shipped layouts' names (`demo`, `vllm-cpu`, …)."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


def builtin_layout(name: str) -> Path | None:
    """The shipped layout called `name` (or `name.toml`), None when there is none."""
    if not name or "/" in name or os.sep in name:
        return None
    path = BUILTIN_DIR / (name if name.endswith(".toml") else f"{name}.toml")
    return path if path.is_file() else None


def _named(arg: str) -> Path | None:
    """`arg` as a file (as given, else with .toml added), else as a shipped layout's name."""
    path = Path(arg).expanduser()
    if path.is_file():
        return path
    if not arg.endswith(".toml") and path.name and path.with_name(path.name + ".toml").is_file():
        return path.with_name(path.name + ".toml")
    return builtin_layout(arg)


def _not_a_file(path: Path) -> str | None:
    """What `path` is when it exists but is no regular file (a folder, a device, a pipe), else None."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


# -- the last-used session ------------------------------------------------------------------------


def remember_last(path: str | os.PathLike[str]) -> None:
    """Record `path` as the session commands and the dashboard use when given no layout. A convenience:
    a state dir that cannot be written is no failure."""
    try:
        atomic_write_text(
            paths.state_dir() / _LAST, str(Path(path).expanduser().resolve()) + "\n", mode=0o600
        )
    except OSError:
        pass


def _recorded_last() -> Path | None:
    try:
        text = (paths.state_dir() / _LAST).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return Path(text) if text else None


def last_layout() -> Path | None:
    """The last-used layout file, or None when none was recorded or it no longer exists."""
    recorded = _recorded_last()
    return recorded if recorded is not None and recorded.is_file() else None


def default_layout() -> Path | None:
    """What the dashboard opens with no argument: the last session, else the shipped demo."""
    return last_layout() or builtin_layout(DEMO)


def resolve_layout_arg(arg: str | os.PathLike[str] | None) -> Path:
    """An explicit layout (a path, or a shipped layout's name), else the last used one, else
    NoLayoutError telling the user what to do."""
    if arg is not None and str(arg) != "":
        found = _named(str(arg))
        if found is None:
            not_a_file = _not_a_file(Path(arg).expanduser())
            if not_a_file:
                raise NoLayoutError(f"{arg}: {not_a_file}, not a layout file")
            shipped = ", ".join(builtin_names())
            raise NoLayoutError(f"{arg}: no such layout file (shipped layouts: {shipped})")
        return found
    recorded = _recorded_last()
    if recorded is None:
        raise NoLayoutError(
            "no layout given and no session used before: pass a layout file or a shipped layout's "
            f"name, e.g. `vtui up {DEMO}`"
        )
    if not recorded.is_file():
        raise NoLayoutError(f"the last session's layout {recorded} no longer exists: pass a layout file")
    return recorded


def _instance_names(path: Path | None) -> set[str]:
    """The instance names of a layout file, read cheaply (no validation); empty when unreadable."""
    if path is None:
        return set()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return set()
    instances = data.get("instance")
    if not isinstance(instances, list):
        return set()
    return {str(t.get("name")) for t in instances if isinstance(t, dict)}


def split_layout_args(positional: Iterable[str]) -> tuple[Path, list[str]]:
    """`[LAYOUT] NAME…` -> (layout path, names): the first word is the layout when it names a file, ends
    in .toml, or names a shipped layout (unless the last session has an instance of that name); otherwise
    every word is an instance name and the layout is the last used one."""
    words = list(positional)
    if words:
        first = words[0]
        if first.endswith(".toml") or Path(first).expanduser().is_file():
            return resolve_layout_arg(first), words[1:]
        if _named(first) is not None and first not in _instance_names(last_layout()):
            return resolve_layout_arg(first), words[1:]
    return resolve_layout_arg(None), words
