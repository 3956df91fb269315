"""Where one session's supervisor keeps its socket, lock, registration and log: all in the state dir
(0700). Stdlib only (the CLI's fast path imports it).

A Unix socket's path holds at most 107 bytes (Linux's sun_path, NUL included). A state dir too deep for
that gets its sockets under a private folder instead, as tmux keeps its under /tmp/tmux-UID:
`$XDG_RUNTIME_DIR/vtui-UID/` (else the temp dir's, else /tmp's: the first that exists and fits), named
by a hash of the path they stand for, so every state dir keeps sockets of its own."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from vtui.core import paths

__all__ = [
    "Registration",
    "info_path",
    "lock_path",
    "log_path",
    "registrations",
    "short_socket",
    "socket_path",
]


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


SUN_PATH_MAX = 107  # bytes of a Unix socket path (sockaddr_un.sun_path is 108 with the NUL)


class SocketDirError(RuntimeError):
    """The private folder for sockets of a deep state dir is not this user's own (0700)."""


def socket_path(session: str) -> Path:
    return short_socket(paths.state_dir() / f"{_safe(session)}.sock")


def short_socket(path: Path) -> Path:
    """`path`, or, when it is too long for a Unix socket, a short stand-in for it in this user's private
    socket folder (named by a hash of `path`): every socket vtui binds or forwards goes through here."""
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        return path
    import hashlib  # a deep state dir only: not on `vtui ps`'s usual path
    import tempfile

    name = f"{hashlib.sha256(os.fsencode(path)).hexdigest()[:24]}.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    for base in (runtime, tempfile.gettempdir(), "/tmp"):
        if not base or len(os.fsencode(Path(base) / f"vtui-{os.getuid()}" / name)) > SUN_PATH_MAX:
            continue
        if os.path.isdir(base):
            return _short_socket_dir(base) / name
    raise SocketDirError(f"no folder short enough for the socket of {path} ({SUN_PATH_MAX} bytes at most)")


def _short_socket_dir(base: str) -> Path:
    """`vtui-UID` under `base` ($XDG_RUNTIME_DIR or the temp dir): made 0700, and refused (SocketDirError)
    when someone else made it or others may enter it (a socket there could be someone else's)."""
    folder = Path(base) / f"vtui-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise SocketDirError(
            f"{folder}: not a folder of this user's alone (mode {stat.filemode(info.st_mode)}, owner "
            f"uid {info.st_uid}); vtui keeps its sockets there because the state dir "
            f"{paths.state_dir()} is too deep for a Unix socket path ({SUN_PATH_MAX} bytes)"
        )
    return folder


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
