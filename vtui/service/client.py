"""The one client of a session supervisor's Unix socket: HTTP/1.1 through h11, for the CLI (blocking:
`ServiceClient`), the dashboard and other hosts' forwarded sockets (asyncio: `request`, `open_feed`,
`feed_lines`), plus the on-demand start of a supervisor process (detached in its own session, so it
outlives the terminal) and its replacement (`handover`). No other module of vtui opens the socket
(tests/test_architecture.py).

h11, not httpx (`benchmarks/bench_socket_client.py`): importing httpx costs more than `vtui ps`'s whole
run, and on the feed, which carries every sample and log line of every instance, its streaming layers
cost the dashboard more than the parsing does. A request is one short connection
(`Connection: close`); the feed is one long one, read a line at a time.

Every answer names the supervisor's API and vtui versions (`api`). Another vtui version of the same
API is said once, on stderr; another API version is refused (`VersionMismatch`), in one line that
names the command replacing the supervisor without stopping its instances.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h11

from vtui.core.selfrun import module_argv
from vtui.service import locations
from vtui.service.api import API_HEADER, API_VERSION, VERSION_HEADER, VTUI_VERSION, handover_command

if TYPE_CHECKING:
    import asyncio
    import subprocess

__all__ = [
    "Connection",
    "RemoteError",
    "ServiceClient",
    "ServiceError",
    "ServiceUnavailable",
    "VersionMismatch",
    "ensure_supervisor",
    "feed_lines",
    "find_supervisor",
    "handover",
    "open_feed",
    "request",
    "version_problem",
]

START_TIMEOUT = 20.0
LOG_KEEP_BYTES = 4 << 20  # a supervisor log past this size (every POST, operation and state change of
# the session's past supervisors) moves to <log>.1 when the next supervisor starts
HANDOVER_TIMEOUT = 60.0  # the old supervisor's exit (it ends its feeds and scrapes, leaves instances)
READ = 1 << 16

Connection = tuple["asyncio.StreamReader", "asyncio.StreamWriter"]


class ServiceUnavailable(Exception):
    """No supervisor answers on the session's socket."""


class VersionMismatch(ServiceUnavailable):
    """The supervisor speaks another API version; the message is the one line to show."""


class ServiceError(Exception):
    """The supervisor answered with an error: `status` (HTTP) and its JSON body. 400: bad input, 404: an
    unknown route or instance, 405: a known route asked with another method, 409: refused now (another
    operation runs on the instance, a preflight), 500: a bug of the supervisor's, `error_id` in its log."""

    def __init__(self, status: int, body: dict[str, Any], session: str | None = None) -> None:
        message = str(body.get("error") or f"HTTP {status}")
        if status >= 500 and body.get("error_id") and session is not None:
            message += f" (see {locations.log_path(session)}, error {body['error_id']})"
        super().__init__(message)
        self.status = status
        self.body = body

    @property
    def error_id(self) -> str | None:
        """A 500's id, also in the supervisor's log beside the traceback."""
        found = self.body.get("error_id")
        return str(found) if found else None

    @property
    def problems(self) -> list[str]:
        return [
            str(p) for p in self.body.get("problems") or [self.body.get("error") or f"HTTP {self.status}"]
        ]


class RemoteError(RuntimeError):
    """The dashboard's side: the session supervisor refused a request (its message) or could not be
    reached."""


# -- versions ----------------------------------------------------------------------------------------
_said_versions: set[tuple[str, str]] = set()  # (session, their version) said once per process


def version_problem(
    session: str, api: int, version: str | None, host: str | None = None
) -> tuple[str | None, bool]:
    """What a client says of a supervisor of API `api` running vtui `version`: (the line, or None when
    both match; whether the API differs, so that nothing more is asked of it)."""
    if api == API_VERSION and version == VTUI_VERSION:
        return None, False
    where = f"{host}'s " if host else ""
    theirs = f"vtui {version}" if version else "a vtui from before versioned APIs"
    line = (
        f"vtui: {where}session {session}'s supervisor runs {theirs} (API {api}), this is vtui {VTUI_VERSION} "
        f"(API {API_VERSION}); `{handover_command(session, host)}` replaces it, the instances keep running"
    )
    return line, api != API_VERSION


def _versions(headers: Sequence[tuple[bytes, bytes]]) -> tuple[int, str | None]:
    api, version = 0, None
    for name, value in headers:
        if name == API_HEADER.encode():
            api = int(value) if value.isdigit() else -1
        elif name == VERSION_HEADER.encode():
            version = value.decode("ascii", "replace")
    return api, version


def _request_headers(payload: bytes | None, close: bool = True) -> list[tuple[str, str]]:
    headers = [("host", "vtui"), (API_HEADER, str(API_VERSION))]
    if close:
        headers.append(("connection", "close"))
    if payload is not None:
        headers += [("content-type", "application/json"), ("content-length", str(len(payload)))]
    return headers


def _request_bytes(
    conn: h11.Connection, method: str, target: str, payload: bytes | None, close: bool
) -> bytes:
    headers = _request_headers(payload, close)
    data = conn.send(h11.Request(method=method, target=target, headers=headers)) or b""
    if payload:
        data += conn.send(h11.Data(data=payload)) or b""
    return data + (conn.send(h11.EndOfMessage()) or b"")


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(data) if data else {}
    except ValueError:
        return {"error": data.decode(errors="replace")[:500]}
    return answer if isinstance(answer, dict) else {"result": answer}


# -- blocking: the CLI -------------------------------------------------------------------------------
class _Gone(Exception):
    """The connection closed before a whole answer came."""


def _connect(path: Path, timeout: float | None) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


def _head(conn: h11.Connection, sock: socket.socket) -> h11.Response:
    """The answer's status line and headers."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(READ))
        elif isinstance(event, h11.Response):
            return event
        elif isinstance(event, h11.ConnectionClosed):
            raise _Gone("closed before an answer")


def _body(conn: h11.Connection, sock: socket.socket) -> Iterator[bytes]:
    """The answer's body as it comes (a feed's chunks), to its end."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(READ))
        elif isinstance(event, h11.Data):
            yield bytes(event.data)
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            return


class ServiceClient:
    """Requests to one session's supervisor. Each call is one short connection (a CLI makes a few).
    `check_version=False`: talk to a supervisor of any API version (`handover`)."""

    def __init__(self, session: str, *, socket_file: Path | None = None, check_version: bool = True) -> None:
        self.session = session
        self.path = socket_file or locations.socket_path(session)
        self.check_version = check_version
        self.found_status: dict[str, Any] | None = None  # the full /status find_supervisor's look got
        self.api_version: int | None = None  # the supervisor's, from its last answer
        self.vtui_version: str | None = None

    def _met(self, response: h11.Response) -> None:
        self.api_version, self.vtui_version = _versions(response.headers)
        line, refused = version_problem(self.session, self.api_version, self.vtui_version)
        if line is None or not self.check_version:
            return
        if refused:
            raise VersionMismatch(line)
        if (self.session, str(self.vtui_version)) not in _said_versions:
            _said_versions.add((self.session, str(self.vtui_version)))
            print(line, file=sys.stderr)

    def _unavailable(self, exc: BaseException) -> ServiceUnavailable:
        if isinstance(exc, ConnectionRefusedError | FileNotFoundError):
            return ServiceUnavailable(f"no supervisor for session {self.session}: {exc}")
        return ServiceUnavailable(f"the supervisor of {self.session} went away: {exc}")

    def request(
        self, method: str, target: str, body: dict[str, Any] | None = None, *, timeout: float | None = 30.0
    ) -> dict[str, Any]:
        payload = json.dumps(body).encode() if body is not None else None
        conn = h11.Connection(h11.CLIENT)
        try:
            with _connect(self.path, timeout) as sock:
                sock.sendall(_request_bytes(conn, method, target, payload, close=True))
                response = _head(conn, sock)
                data = b"".join(_body(conn, sock))
        except (ConnectionRefusedError, FileNotFoundError, ConnectionResetError, BrokenPipeError) as exc:
            raise self._unavailable(exc) from exc
        except (_Gone, h11.RemoteProtocolError) as exc:
            raise self._unavailable(exc) from exc
        self._met(response)
        answer = _json_object(data)
        if response.status_code >= 400:
            raise ServiceError(response.status_code, answer, self.session)
        return answer

    def get(self, target: str, **kw: Any) -> dict[str, Any]:
        return self.request("GET", target, **kw)

    def post(self, target: str, body: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        return self.request("POST", target, body or {}, **kw)

    def alive(self) -> bool:
        """A supervisor answers (of any version: `ensure_supervisor` must not start a second one)."""
        try:
            self.get("/status?brief=1", timeout=5.0)
            return True
        except VersionMismatch:
            return True
        except (ServiceUnavailable, ServiceError, OSError):
            return False

    def status_if_alive(self) -> dict[str, Any] | None:
        """The full /status, or None where `alive()` would be False: the look and the status a command
        asks for next in one request (a CLI round trip less). Raises VersionMismatch."""
        try:
            return self.get("/status", timeout=5.0)
        except VersionMismatch:
            raise
        except (ServiceUnavailable, ServiceError, OSError):
            return None

    def feed(
        self, timeout: float | None = None, on_connect: Callable[[socket.socket], None] | None = None
    ) -> Iterator[dict[str, Any]]:
        """The supervisor's feed, one JSON object per line, until the connection ends. `on_connect`
        gets the socket once connected (another thread may shut it down to end the feed)."""
        conn = h11.Connection(h11.CLIENT)
        try:
            sock = _connect(self.path, timeout)
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            raise self._unavailable(exc) from exc
        with sock:
            try:
                sock.sendall(_request_bytes(conn, "GET", "/feed", None, close=False))
                if on_connect is not None:
                    on_connect(sock)
                response = _head(conn, sock)
            except (_Gone, h11.RemoteProtocolError, OSError) as exc:
                raise self._unavailable(exc) from exc
            self._met(response)
            if response.status_code != 200:
                data = b"".join(_body(conn, sock))
                raise ServiceError(response.status_code, _json_object(data), self.session)
            pending = b""
            try:
                for chunk in _body(conn, sock):
                    pending += chunk
                    if b"\n" in pending:
                        *lines, pending = pending.split(b"\n")
                        for line in lines:
                            if line.strip():
                                yield json.loads(line)
            except (OSError, h11.RemoteProtocolError):
                return  # shut down by `on_connect`'s holder, or the supervisor went away


def find_supervisor(layout_path: str | os.PathLike[str] | None) -> ServiceClient | None:
    """The live supervisor that was given this layout file (by path: the file itself may have moved,
    been deleted or edited into an invalid state), else None. Raises VersionMismatch."""
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
    with contextlib.suppress(OSError):  # the log of past supervisors: one older file kept
        if log.stat().st_size > LOG_KEEP_BYTES:
            os.replace(log, log.with_name(log.name + ".1"))
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


def _reap_later(proc: subprocess.Popen[bytes]) -> None:
    """The supervisor runs on; do not leave a zombie behind if it ends while this process lives."""
    import threading

    threading.Thread(target=proc.wait, daemon=True).start()


def handover(
    session: str, layout_path: str | os.PathLike[str] | None = None, *, timeout: float = HANDOVER_TIMEOUT
) -> tuple[dict[str, Any], ServiceClient]:
    """Replace the session's supervisor (of any version) with one of this vtui without stopping the
    instances: the old one is asked to end supervision only (`POST /shutdown`, instances left running),
    and once its process is gone a new one is started on its layout file (`layout_path`, else the one
    it ran); the new one re-adopts what runs. Returns (the old one's brief status, the new client)."""
    old = ServiceClient(session, check_version=False)
    status = old.get("/status?brief=1", timeout=10.0)
    path = layout_path or status.get("layout_path")
    if not path:
        raise ServiceUnavailable(f"the supervisor of {session} runs no layout file: name one")
    pid = status.get("supervisor_pid")
    old.post("/shutdown", {"stop": False}, timeout=10.0)
    deadline = time.monotonic() + timeout
    while isinstance(pid, int) and _alive(pid):
        if time.monotonic() > deadline:
            raise ServiceUnavailable(
                f"the supervisor of {session} (pid {pid}) did not exit within {timeout:g} s"
            )
        time.sleep(0.05)
    client, _ = ensure_supervisor(session, path)
    return status, client


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- asyncio: the dashboard, other hosts --------------------------------------------------------------
async def open_feed(socket_file: Path) -> Connection:
    """A connection to the supervisor for `feed_lines` (OSError when none answers)."""
    import asyncio

    return await asyncio.open_unix_connection(str(socket_file))


async def request(
    socket_file: Path, method: str, target: str, body: dict[str, Any] | None = None, *, who: str
) -> tuple[int, dict[str, Any]]:
    """One request on its own connection: (HTTP status, the JSON object answered). Raises RemoteError
    (its message starts with `who`) when the supervisor cannot be reached or answers no JSON object."""
    try:
        reader, writer = await open_feed(socket_file)
    except OSError as exc:
        raise RemoteError(f"{who}: {exc}") from exc
    conn = h11.Connection(h11.CLIENT)
    status, chunks = 0, []
    try:
        payload = json.dumps(body).encode() if body is not None else None
        writer.write(_request_bytes(conn, method, target, payload, close=True))
        await writer.drain()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(READ))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
    except (OSError, h11.ProtocolError) as exc:
        raise RemoteError(f"{who}: {exc!r}") from exc
    finally:
        writer.close()
    import orjson  # a backfill's answers are ~100 KB each

    raw = b"".join(chunks) or b"{}"
    try:
        answer = orjson.loads(raw)
    except ValueError:
        try:
            answer = json.loads(raw)  # NaN/Infinity (json writes them)
        except ValueError as exc:
            raise RemoteError(f"{who}: HTTP {status}, not JSON") from exc
    return status, answer if isinstance(answer, dict) else {}


async def feed_lines(connection: Connection) -> AsyncGenerator[bytes, None]:
    """`GET /feed` on an open connection: its NDJSON lines, until the supervisor ends the stream or goes
    away (the connection is closed on the way out). The first is the hello, which names the
    supervisor's versions (`version_problem`)."""
    reader, writer = connection
    conn = h11.Connection(h11.CLIENT)
    try:
        writer.write(_request_bytes(conn, "GET", "/feed", None, close=False))
        await writer.drain()
        pending = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(READ))  # b"": the supervisor went away
            elif isinstance(event, h11.Response):
                if event.status_code != 200:
                    raise RemoteError(f"the feed answered HTTP {event.status_code}")
            elif isinstance(event, h11.Data):
                pending += event.data
                if b"\n" in pending:
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield line
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return
    finally:
        writer.close()
