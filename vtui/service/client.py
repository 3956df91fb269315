"""The CLI's client of a session supervisor: HTTP/1.1 over the session's Unix socket, and the
on-demand start of the supervisor process, detached in its own session so it outlives the terminal.

Stdlib only, and light: `vtui ps` imports this and nothing heavier when a supervisor already runs.
A request is one short connection (`Connection: close`) on a plain socket: the answers all carry a
Content-Length, and importing `http.client` (which brings the email package and ssl) costs more than
the exchange; httpx alone costs more than `vtui ps`'s whole budget. The streamed feed (chunked) is read
with `http.client`, imported when a feed is opened.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vtui.core.selfrun import module_argv
from vtui.service import locations

__all__ = ["ServiceClient", "ServiceError", "ServiceUnavailable", "ensure_supervisor", "find_supervisor"]

START_TIMEOUT = 20.0


class ServiceUnavailable(Exception):
    """No supervisor answers on the session's socket."""


class ServiceError(Exception):
    """The supervisor answered with an error: `status` (HTTP) and its JSON body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("error") or f"HTTP {status}")
        self.status = status
        self.body = body

    @property
    def problems(self) -> list[str]:
        return [
            str(p) for p in self.body.get("problems") or [self.body.get("error") or f"HTTP {self.status}"]
        ]


if TYPE_CHECKING:
    import http.client
    import subprocess


def _unix_connection(path: Path, timeout: float | None) -> http.client.HTTPConnection:
    """An `http.client` connection on the Unix socket `path` (the feed's reader)."""
    import http.client

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            if self.timeout is not None:
                sock.settimeout(self.timeout)
            try:
                sock.connect(str(path))
            except OSError:
                sock.close()
                raise
            self.sock = sock

    return UnixConnection("localhost", timeout=timeout)


class _Gone(Exception):
    """The connection closed before a whole answer came."""


def _exchange(
    path: Path, method: str, target: str, payload: bytes | None, timeout: float | None
) -> tuple[int, bytes]:
    """One request on a new connection to the Unix socket `path`: (status, body)."""
    head = f"{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
    if payload is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
    chunks: list[bytes] = []
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(head.encode("latin-1") + b"\r\n" + (payload or b""))
        while chunk := sock.recv(1 << 16):  # the supervisor closes after the answer
            chunks.append(chunk)
    finally:
        sock.close()
    data = b"".join(chunks)
    top, sep, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = top.split(b"\r\n")
    parts = status_line.split(None, 2)
    if not sep or len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise _Gone(f"no whole answer ({len(data)} bytes)")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    length = headers.get(b"content-length")
    if length is not None:
        if not length.isdigit() or len(body) < int(length):
            raise _Gone(f"answer cut short ({len(body)} of {length.decode(errors='replace')} bytes)")
        body = body[: int(length)]
    elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = _unchunk(body)
    return int(parts[1]), body


def _unchunk(data: bytes) -> bytes:
    out: list[bytes] = []
    pos = 0
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            raise _Gone("chunked answer cut short")
        try:
            size = int(data[pos:eol].split(b";", 1)[0], 16)
        except ValueError:
            raise _Gone("bad chunk size in the answer") from None
        if size == 0:
            return b"".join(out)
        out.append(data[eol + 2 : eol + 2 + size])
        pos = eol + 2 + size + 2


class ServiceClient:
    """Requests to one session's supervisor. Each call is one short connection (a CLI makes a few)."""

    def __init__(self, session: str, *, socket_file: Path | None = None) -> None:
        self.session = session
        self.path = socket_file or locations.socket_path(session)
        self.found_status: dict[str, Any] | None = None  # the full /status find_supervisor's look got

    def request(
        self, method: str, target: str, body: dict[str, Any] | None = None, *, timeout: float | None = 30.0
    ) -> dict[str, Any]:
        payload = json.dumps(body).encode() if body is not None else None
        try:
            status, data = _exchange(self.path, method, target, payload, timeout)
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            raise ServiceUnavailable(f"no supervisor for session {self.session}: {exc}") from exc
        except (_Gone, ConnectionResetError, BrokenPipeError) as exc:
            raise ServiceUnavailable(f"the supervisor of {self.session} went away: {exc}") from exc
        try:
            answer = json.loads(data) if data else {}
        except ValueError:
            answer = {"error": data.decode(errors="replace")}
        if status >= 400:
            raise ServiceError(status, answer if isinstance(answer, dict) else {"error": answer})
        return answer if isinstance(answer, dict) else {"result": answer}

    def get(self, target: str, **kw: Any) -> dict[str, Any]:
        return self.request("GET", target, **kw)

    def post(self, target: str, body: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        return self.request("POST", target, body or {}, **kw)

    def alive(self) -> bool:
        try:
            self.get("/status?brief=1", timeout=5.0)
            return True
        except (ServiceUnavailable, ServiceError, OSError):
            return False

    def status_if_alive(self) -> dict[str, Any] | None:
        """The full /status, or None where `alive()` would be False: the look and the status a command
        asks for next in one request (a CLI round trip less)."""
        try:
            return self.get("/status", timeout=5.0)
        except (ServiceUnavailable, ServiceError, OSError):
            return None

    def feed(
        self, timeout: float | None = None, on_connect: Callable[[socket.socket], None] | None = None
    ) -> Iterator[dict[str, Any]]:
        """The supervisor's feed, one JSON object per line, until the connection ends. `on_connect`
        gets the socket once connected (another thread may shut it down to end the feed)."""
        import http.client

        conn = _unix_connection(self.path, timeout)
        try:
            try:
                conn.request("GET", "/feed")
                if on_connect is not None and conn.sock is not None:
                    on_connect(conn.sock)
                response = conn.getresponse()
            except (ConnectionRefusedError, FileNotFoundError) as exc:
                raise ServiceUnavailable(f"no supervisor for session {self.session}: {exc}") from exc
            if response.status != 200:
                raise ServiceError(response.status, {"error": response.read().decode(errors="replace")})
            while True:
                try:
                    line = response.readline()
                except (OSError, http.client.HTTPException):
                    return
                if not line:
                    return
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            conn.close()


def find_supervisor(layout_path: str | os.PathLike[str] | None) -> ServiceClient | None:
    """The live supervisor that was given this layout file (by path: the file itself may have moved,
    been deleted or edited into an invalid state), else None."""
    if layout_path is None:
        return None
    for info in locations.registrations():
        if locations.same_file(info.get("layout_path"), layout_path):
            client = ServiceClient(info["session"])
            client.found_status = client.status_if_alive()
            if client.found_status is not None:
                return client
    return None


def ensure_supervisor(session: str, layout_path: str | os.PathLike[str]) -> tuple[ServiceClient, bool]:
    """The session's supervisor, started on demand (detached: its own session, stdio to its log) and
    given `layout_path`. Returns (client, started). Two commands racing here start at most one: the
    supervisor takes the session's lock before it binds the socket; a loser exits."""
    client = ServiceClient(session)
    if client.alive():
        return client, False
    import subprocess

    log = locations.log_path(session)
    with open(log, "ab") as out:
        os.chmod(log, 0o600)
        proc = subprocess.Popen(
            module_argv("vtui.service", "--layout", str(Path(layout_path).resolve())),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if client.alive():
            _reap_later(proc)
            return client, True
        code = proc.poll()
        if code not in (None, 0):  # 0: another start won the lock; keep waiting for that one
            raise ServiceUnavailable(f"the supervisor of {session} could not start (exit {code}); see {log}")
        time.sleep(0.02)
    raise ServiceUnavailable(
        f"the supervisor of {session} did not answer within {START_TIMEOUT:g} s; see {log}"
    )


def _reap_later(proc: subprocess.Popen) -> None:
    """The supervisor runs on; do not leave a zombie behind if it ends while this process lives."""
    import threading

    threading.Thread(target=proc.wait, daemon=True).start()
