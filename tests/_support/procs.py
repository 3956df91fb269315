"""Process checks shared by the test folders that launch real processes (tests/core, tests/integration)."""

from __future__ import annotations

import psutil

from vtui.core.launcher import MARKER


def marked(prefix: str) -> list[psutil.Process]:
    """Live processes whose VTUI_INSTANCE marker starts with `prefix`."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(MARKER, "").startswith(prefix):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def alive(pid: int) -> bool:
    """The pid names a process that is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
