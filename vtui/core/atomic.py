"""Atomic file writes: temp file in the same folder, fsync, os.replace. An interrupted save leaves the
old file whole.

A save killed before its `os.replace` (SIGKILL, power loss) leaves its temp file behind, up to the full
size of the file. Temp files are named `.NAME.PID-RANDOM.tmp`, so the next save of NAME removes the ones
whose writer is gone (another process's save in progress is left alone), and `sweep_stale_temps` does
the same for a whole folder (the run-records folder at start). Not only the next save: reading a layout
sweeps that file's, and a session supervisor at its start sweeps the whole state dir
(`sweep_stale_temps_under`), so a killed writer's temp file does not wait for a save that may never come.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from pathlib import Path

STALE_AFTER = 3600.0  # a temp file this old is stale even if a process with its writer's pid lives
LEGACY_STALE_AFTER = 60.0  # a temp file named without a pid (an older vtui's) is stale after this
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?:(?P<pid>\d+)-)?[A-Za-z0-9_]+\.tmp$")
_mine: set[str] = set()  # temp files this process is writing now (several threads may save)
_mine_lock = threading.Lock()


def _stale(path: Path, pid: int | None, now: float) -> bool:
    if str(path) in _mine:
        return False
    try:
        age = now - path.stat().st_mtime
    except OSError:
        return False
    if pid is None:
        return age > LEGACY_STALE_AFTER
    if pid == os.getpid():  # ours, and no save of ours is writing it: an interrupted save's
        return True
    import psutil  # here, not at import: the dashboard's start loads this module (layouts, history)

    return not psutil.pid_exists(pid) or age > STALE_AFTER


def sweep_stale_temps(folder: str | os.PathLike[str], name: str | None = None) -> list[Path]:
    """Remove the temp files interrupted saves left in `folder` (only those of file `name` when given);
    returns what was removed. Never raises."""
    removed: list[Path] = []
    now = time.time()
    try:
        entries = list(Path(folder).glob(f".{glob_escape(name)}.*.tmp" if name else ".*.tmp"))
    except OSError:
        return removed
    for path in entries:
        match = _TEMP.match(path.name)
        if match is None or (name is not None and match["name"] != name):
            continue
        pid = int(match["pid"]) if match["pid"] else None
        with _mine_lock:
            if not _stale(path, pid, now):
                continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


def sweep_stale_temps_under(root: str | os.PathLike[str], depth: int = 3) -> list[Path]:
    """`sweep_stale_temps` in `root` and its folders down to `depth` levels (symlinks not followed);
    returns what was removed. Never raises."""
    removed: list[Path] = []
    base = Path(root)
    for folder, dirs, _files in os.walk(base, onerror=lambda exc: None):
        if len(Path(folder).relative_to(base).parts) >= depth:
            dirs.clear()
        removed += sweep_stale_temps(folder)
    return removed


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> None:
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if mode is None:
        mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
    sweep_stale_temps(folder, target.name)
    with _mine_lock:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}-", suffix=".tmp", dir=folder)
        _mine.add(tmp)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    finally:
        with _mine_lock:
            _mine.discard(tmp)
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def atomic_write_text(path: str | os.PathLike[str], text: str, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)
