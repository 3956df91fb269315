"""Where one session's supervisor keeps its socket, lock, registration and log: all in the state dir
(0700). Stdlib only (the CLI's fast path imports it)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from vtui.core import paths

__all__ = ["Registration", "info_path", "lock_path", "log_path", "registrations", "socket_path"]


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def socket_path(session: str) -> Path:
    return paths.state_dir() / f"{_safe(session)}.sock"


def lock_path(session: str) -> Path:
    return paths.state_dir() / f"{_safe(session)}.lock"


def info_path(session: str) -> Path:
    """The running supervisor's registration: pid, session, the layout file it was given."""
    return paths.state_dir() / f"{_safe(session)}.supervisor.json"


def log_path(session: str) -> Path:
    """The supervisor process's own stdout/stderr."""
    return paths.logs_dir() / f"{_safe(session)}.supervisor.log"


Registration = dict[str, Any]


def registrations() -> list[Registration]:
    """Every registered supervisor (some may be dead: the socket answering is the proof of life)."""
    found = []
    for file in sorted(paths.state_dir().glob("*.supervisor.json")):
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("session"), str):
            found.append(data)
    return found


def same_file(a: str | os.PathLike[str] | None, b: str | os.PathLike[str] | None) -> bool:
    if not a or not b:
        return False
    return os.path.abspath(os.path.expanduser(str(a))) == os.path.abspath(os.path.expanduser(str(b)))
