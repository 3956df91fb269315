"""Where vtui keeps its state (XDG): run records, logs, the last-used session. Owner-only (0700)."""

from __future__ import annotations

import os
from pathlib import Path


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def state_dir() -> Path:
    """$VTUI_STATE_DIR, else $XDG_STATE_HOME/vtui, else ~/.local/state/vtui (created 0700)."""
    explicit = os.environ.get("VTUI_STATE_DIR")
    if explicit:
        return _private_dir(Path(explicit))
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return _private_dir(Path(base) / "vtui")


def logs_dir() -> Path:
    return _private_dir(state_dir() / "logs")


def runs_dir() -> Path:
    return _private_dir(state_dir() / "runs")


def config_dir() -> Path:
    """$VTUI_CONFIG_DIR, else $XDG_CONFIG_HOME/vtui, else ~/.config/vtui (keymap overrides live here)."""
    explicit = os.environ.get("VTUI_CONFIG_DIR")
    if explicit:
        return _private_dir(Path(explicit))
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return _private_dir(Path(base) / "vtui")


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/vtui (flag schemas per vLLM version are cached here)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return _private_dir(Path(base) / "vtui")
