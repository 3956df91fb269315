"""Size-capped, rotated instance logs: the writer (a tiny pump process), a rotation-aware tailer, a
last-N-lines reader and a reader of the lines before a given place (`read_older`, scrollback).

Why a pump process: an instance outlives vtui, so its output cannot go through a pipe that vtui reads
(vLLM would die of SIGPIPE when vtui exits), and a plain file would grow without bound while no vtui
runs. The launcher therefore starts `python logfile.py --log … -- ARGV…` as the session leader; it
spawns ARGV with stdout+stderr on a pipe, writes the pipe into `name.log` (rotated to `name.log.1…K`,
files 0600, at most max_bytes each), reports the child pid on its own stdout, records how the child
ended in `--exit-file` (`read_exit`: exit code, or the signal that killed it and whether it dumped core,
plus the known killers running at that moment, `supervisor.killers`), and exits when the pipe is closed by
every process of the instance.

Stdlib only: this file runs as a script in the pump, so it must not import vtui (it loads the sibling,
stdlib-only killers.py by path, and carries on without it if that fails).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_BACKUPS = 3


class RotatingWriter:
    """Appends bytes to `path`; before a file would pass `max_bytes` it becomes `path.1` (older ones
    shift up to `path.K`, the oldest dropped). Cuts at a newline where one is near, so lines stay whole."""

    def __init__(
        self, path: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES, backups: int = DEFAULT_BACKUPS
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max(256, int(max_bytes))
        self.backups = max(1, int(backups))
        self._lock = threading.Lock()
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

    def _open(self) -> int:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.fchmod(fd, 0o600)
        return fd

    def _rotate(self) -> None:
        os.close(self._fd)
        for i in range(self.backups - 1, 0, -1):
            older = Path(f"{self.path}.{i}")
            if older.exists():
                os.replace(older, f"{self.path}.{i + 1}")
        if self.path.exists():
            os.replace(self.path, f"{self.path}.1")
        self._fd = self._open()
        self._size = 0

    def write(self, data: bytes) -> None:
        with self._lock:
            while data:
                room = self.max_bytes - self._size
                if room <= 0:
                    self._rotate()
                    continue
                piece = data[:room]
                if len(piece) < len(data):
                    cut = piece.rfind(b"\n")
                    if cut >= 0:
                        piece = piece[: cut + 1]
                    elif self._size > 0:  # no newline in reach: start a fresh file for this line
                        self._rotate()
                        continue
                os.write(self._fd, piece)
                self._size += len(piece)
                data = data[len(piece) :]

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


MAX_LINE = 16 << 10  # characters of one log line kept in memory; a longer one is cut (the file keeps it)
MAX_READ = 4 << 20  # bytes one `LogTailer.read` takes at most (a flood is read in pieces, not whole)


class LogTailer:
    """New complete lines of a log file since the last `read()`, across rotations and truncation.

    Created before a spawn, it starts at the file's current end, so it sees exactly the new run."""

    def __init__(self, path: str | os.PathLike[str], from_start: bool = False) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._ino: int | None = None
        self._pos = 0  # the fd's offset (kept here: a look with nothing new is one stat)
        self._pending = b""
        self._from_start = from_start
        self._try_open(at_end=not from_start)

    def _try_open(self, at_end: bool) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        self._fd, self._ino = fd, os.fstat(fd).st_ino
        self._pos = os.lseek(fd, 0, os.SEEK_END) if at_end else 0
        return True

    def _drain(self) -> bytes:
        assert self._fd is not None
        chunks: list[bytes] = []
        taken = 0
        while taken < MAX_READ:  # a flood far ahead of us: the rest waits for the next read
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                break
            self._pos += len(chunk)
            taken += len(chunk)
            chunks.append(chunk)
        return b"".join(chunks)

    def read(self) -> list[str]:
        data = b""
        if self._fd is None and not self._try_open(at_end=False):
            return []
        assert self._fd is not None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        if st is not None and st.st_ino == self._ino:
            if st.st_size == self._pos:
                return []  # nothing new (the steady state, five times a second per instance)
            if st.st_size < self._pos:
                self._pos = os.lseek(self._fd, 0, os.SEEK_SET)  # truncated in place
        data += self._drain()
        if st is not None and st.st_ino != self._ino:  # rotated: old file finished, follow the new one
            os.close(self._fd)
            self._fd = None
            if self._try_open(at_end=False):
                data += self._drain()
        return self._split(data)

    def _split(self, data: bytes) -> list[str]:
        data = self._pending + data
        *complete, self._pending = data.split(b"\n")
        if len(self._pending) > 4 * MAX_LINE:  # no newline for long: kept whole, it would grow unbounded
            complete.append(self._pending)
            self._pending = b""
        return [_cut(line.decode("utf-8", "replace").rstrip("\r")) for line in complete]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + f" … ({len(line) - MAX_LINE} more characters)"


def log_files(path: str | os.PathLike[str], backups: int = 9) -> list[Path]:
    """The log and its rotated predecessors, oldest first."""
    base = Path(path)
    older = [Path(f"{base}.{i}") for i in range(backups, 0, -1)]
    return [p for p in [*older, base] if p.exists()]


def read_tail(path: str | os.PathLike[str], n: int) -> list[str]:
    """The last `n` lines of a log, reaching into rotated files when the current one is short."""
    lines: list[str] = []
    for file in reversed(log_files(path)):
        with open(file, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            block = b""
            pos = end
            while pos > 0 and block.count(b"\n") <= n:
                step = min(1 << 16, pos)
                pos -= step
                fh.seek(pos)
                block = fh.read(step) + block
        chunk = [ln.decode("utf-8", "replace").rstrip("\r") for ln in block.split(b"\n")]
        if chunk and chunk[-1] == "":
            chunk.pop()
        if pos > 0:
            chunk = chunk[1:]  # the first piece may be a partial line
        lines = chunk + lines
        if len(lines) >= n:
            break
    return lines[-n:] if n > 0 else []


def lines_backward(path: str | os.PathLike[str]) -> Iterator[str]:
    """The log's lines from the newest back, across its rotated files (blocking: call in a thread)."""
    for file in reversed(log_files(path)):
        try:
            fh = open(file, "rb")
        except OSError:
            continue
        with fh:
            pos = fh.seek(0, os.SEEK_END)
            carry = b""
            last = True  # the piece after the file's final newline (empty, or a line being written)
            while pos > 0:
                step = min(1 << 16, pos)
                pos -= step
                fh.seek(pos)
                block = fh.read(step) + carry
                parts = block.split(b"\n")
                carry = parts[0]
                for raw in reversed(parts[1:]):
                    if not last:
                        yield raw.decode("utf-8", "replace").rstrip("\r")
                    last = False
            if carry and not last:
                yield carry.decode("utf-8", "replace").rstrip("\r")


def read_older(
    path: str | os.PathLike[str], anchor: list[str], count: int, search: int = 2_000_000
) -> list[str] | None:
    """The `count` lines of the log file just before the place where `anchor` (consecutive lines) is,
    oldest first; None when the anchor is not within the last `search` lines (blocking). The log view's
    scrollback: from the file here, through the session supervisor's `/logs?before=` for another
    host's instance."""
    want = list(reversed(anchor))
    window: deque[str] = deque(maxlen=len(want))
    it = lines_backward(path)
    for i, line in enumerate(it):
        window.append(line)
        if list(window) == want:
            older = []
            for line in it:
                older.append(line)
                if len(older) >= count:
                    break
            older.reverse()
            return older
        if i > search:
            return None
    return None


# -- how the child ended ------------------------------------------------------------------------


@dataclass(frozen=True)
class ExitInfo:
    """How an instance's API server ended, as its parent (the pump) saw it in waitid's siginfo.

    `returncode` follows subprocess (negative: killed by that signal). Who sent a signal is not in it
    (Linux gives the sender only to the receiver): `killers` lists the known killers that were running
    when the child died (supervisor.killers), each {"pid", "kind", "command"}."""

    returncode: int
    code: int | None = None  # exit status when it exited
    signal: int | None = None  # the signal that killed it
    core_dumped: bool = False
    at: float | None = None  # time.time() when it was reaped
    killers: tuple[dict[str, Any], ...] = ()

    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"

    def describe(self) -> str:
        """'exited with code 0' / 'killed by SIGTERM (core dumped)', with the killers found, if any."""
        text = (
            f"killed by {self.signal_name}{' (core dumped)' if self.core_dumped else ''}"
            if self.signal is not None
            else f"exited with code {self.code if self.code is not None else self.returncode}"
        )
        if self.killers:
            text += "; running then: " + ", ".join(
                f"{k.get('kind')} (pid {k.get('pid')}: {k.get('command')})" for k in self.killers
            )
        return text

    def to_json(self) -> str:
        return json.dumps(
            {
                "returncode": self.returncode,
                "code": self.code,
                "signal": self.signal,
                "core_dumped": self.core_dumped,
                "at": self.at,
                "killers": list(self.killers),
            }
        )


def parse_exit(text: str) -> ExitInfo | None:
    """An exit file's content: the JSON the pump writes, or a bare returncode (older pumps)."""
    text = text.strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, int) and not isinstance(data, bool):
        return ExitInfo(data, None if data < 0 else data, -data if data < 0 else None)
    if not isinstance(data, dict) or not isinstance(data.get("returncode"), int):
        return None
    killers = data.get("killers") or []
    return ExitInfo(
        int(data["returncode"]),
        data.get("code") if isinstance(data.get("code"), int) else None,
        data.get("signal") if isinstance(data.get("signal"), int) else None,
        bool(data.get("core_dumped")),
        float(data["at"]) if isinstance(data.get("at"), (int, float)) else None,
        tuple(k for k in killers if isinstance(k, dict)) if isinstance(killers, list) else (),
    )


def read_exit(path: str | os.PathLike[str]) -> ExitInfo | None:
    """The exit file's record (None: missing, not written yet, or unreadable)."""
    try:
        return parse_exit(Path(path).read_text())
    except OSError:
        return None


def _audit_killers(child_pid: int) -> tuple[dict[str, Any], ...]:
    """The known killers running now (supervisor.killers, loaded by path); () if that cannot be done."""
    try:
        spec = importlib.util.spec_from_file_location("_vtui_killers", Path(__file__).with_name("killers.py"))
        if spec is None or spec.loader is None:
            return ()
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        found = module.audit(target_pids={child_pid, os.getpid()})
        return tuple(k.to_dict() for k in found)
    except Exception:  # noqa: BLE001 — the audit is a bonus: the exit record must be written regardless
        return ()


def wait_exit(pid: int) -> ExitInfo:
    """Reap child `pid` with waitid and say how it ended (the signal, and whether it dumped core)."""
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED)
            break
        except InterruptedError:
            continue
    at = time.time()
    if info is None:  # cannot happen without WNOHANG; keep mypy and readers honest
        return ExitInfo(0, 0, None, False, at)
    if info.si_code == os.CLD_EXITED:
        return ExitInfo(info.si_status, info.si_status, None, False, at)
    dumped = info.si_code == os.CLD_DUMPED
    return ExitInfo(-info.si_status, None, info.si_status, dumped, at)


# -- the pump process ---------------------------------------------------------------------------
def _write_exit(exit_file: str | None, info: ExitInfo | int) -> None:
    if not exit_file:
        return
    if isinstance(info, int):
        info = ExitInfo(info, info, None, False, time.time())
    tmp = f"{exit_file}.tmp"
    with open(tmp, "w") as fh:
        fh.write(info.to_json())
    os.replace(tmp, exit_file)


def pump_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vtui-logpump")
    parser.add_argument("--log", required=True)
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES)
    parser.add_argument("--backups", type=int, default=DEFAULT_BACKUPS)
    parser.add_argument("--exit-file")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    writer = RotatingWriter(args.log, args.max_bytes, args.backups)
    read_fd, write_fd = os.pipe()
    try:
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd, close_fds=True
        )
    except OSError as exc:
        message = f"cannot start {command[0] if command else '(nothing)'}: {exc.strerror or exc}"
        writer.write(f"[vtui] error: {message}\n".encode())
        print(f"error {message}", flush=True)
        _write_exit(args.exit_file, 127)
        return 127
    os.close(write_fd)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # keep capturing the shutdown; only SIGKILL ends the pump
    try:
        print(f"pid {child.pid}", flush=True)
    except OSError:  # the launcher died before reading it: keep pumping (a supervisor finds us by marker)
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)

    ended: list[ExitInfo] = []

    def wait_child() -> None:
        info = wait_exit(child.pid)
        child.returncode = info.returncode  # reaped here: Popen must not wait for it again
        info = replace(info, killers=_audit_killers(child.pid))  # at once: a pkill is gone in a moment
        ended.append(info)
        _write_exit(args.exit_file, info)

    waiter = threading.Thread(target=wait_child, daemon=True)
    waiter.start()
    while True:
        try:
            chunk = os.read(read_fd, 1 << 16)
        except InterruptedError:
            continue
        if not chunk:
            break
        writer.write(chunk)
    waiter.join()
    how = ended[0].describe() if ended else f"exited with code {child.returncode}"
    writer.write(f"[vtui] process {child.pid} {how}\n".encode())
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(pump_main())
