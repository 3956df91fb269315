"""A lean HTTP/1.1 client on a plain asyncio Protocol, for the load tester's hot path: keep-alive pool
per origin, chunked / Content-Length / until-EOF bodies decoded incrementally on bytes right in
`data_received` (no StreamReader, no task wake-up per network read), one inactivity watchdog per request
(not one timer per read), errors as typed exceptions named like httpx's.

Why: httpx/httpcore/anyio cost ~2-3 ms of CPU per streamed request on this machine (~100-200 µs per
token), enough to make the client a bottleneck on small hosts. Plain `http://` only, no proxies, no
compression, no redirects: `LeanPool.handles(url)` says when a URL is outside that, and callers fall back
to httpx.
"""

from __future__ import annotations

import asyncio
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_MAX_HEAD = 64 * 1024
_MAX_ERROR_BODY = 256 * 1024
_READ = 256 * 1024


class LeanHTTPError(Exception):
    """Base of every failure this client raises (the subclass name says which, like httpx's)."""


class ConnectError(LeanHTTPError):
    pass


class ConnectTimeout(LeanHTTPError):
    pass


class ReadTimeout(LeanHTTPError):
    pass


class RemoteProtocolError(LeanHTTPError):
    """Malformed response, or the server closed the connection before the response ended."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes  # empty when the body went to a sink


class ChunkedDecoder:
    """Incremental `Transfer-Encoding: chunked` decoder: `feed(raw)` returns the payload bytes that raw
    completes; `done` once the last chunk and trailers are read; `extra` holds bytes past the end."""

    __slots__ = ("_buf", "_left", "done", "extra")

    def __init__(self) -> None:
        self._buf = b""
        self._left = -1  # >0: chunk bytes to read; -1: size line; -2: CRLF after data; -3: trailers
        self.done = False
        self.extra = b""

    def feed(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        pos, n = 0, len(buf)
        while pos < n and not self.done:
            left = self._left
            if left > 0:
                take = min(left, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._left = left - take or -2
            elif left == -2:
                if n - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise RemoteProtocolError("chunked body: missing CRLF after chunk data")
                pos += 2
                self._left = -1
            else:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > 8192:
                        raise RemoteProtocolError("chunked body: line too long")
                    break
                line = buf[pos:eol]
                pos = eol + 2
                if left == -3:
                    if not line:
                        self.done = True
                    continue
                try:
                    size = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise RemoteProtocolError(f"chunked body: bad chunk size {line[:40]!r}") from None
                if size < 0:
                    raise RemoteProtocolError("chunked body: negative chunk size")
                self._left = size or -3
        rest = buf[pos:]
        if self.done:
            self.extra, self._buf = rest, b""
        else:
            self._buf = rest
        return out[0] if len(out) == 1 else b"".join(out)


class _NoResponse(ConnectionError):
    """The connection closed before any response byte (a reused one may simply have gone stale)."""


class _StaleConnection(Exception):
    """A reused keep-alive connection turned out closed before any response byte: safe to resend."""


class _Watchdog:
    """Aborts the connection when no byte arrived for `timeout` seconds, or at the loop time `hard`
    (a whole-exchange bound, bytes or not); `touch()` on every read is one float store, the one timer is
    re-armed only when it fires early."""

    __slots__ = ("loop", "timeout", "deadline", "hard", "handle", "conn", "fired")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, timeout: float, conn: _Conn, hard: float | None = None
    ) -> None:
        self.loop, self.timeout, self.conn, self.fired, self.hard = loop, timeout, conn, False, hard
        self.deadline = loop.time() + timeout
        self.handle = loop.call_at(self._next(), self._fire)

    def _next(self) -> float:
        return self.deadline if self.hard is None else min(self.deadline, self.hard)

    def touch(self) -> None:
        self.deadline = self.loop.time() + self.timeout

    @property
    def overdue(self) -> bool:
        return self.hard is not None and self.loop.time() >= self.hard

    def _fire(self) -> None:
        if self.loop.time() < self._next():
            self.handle = self.loop.call_at(self._next(), self._fire)
            return
        self.fired = True
        self.conn.close()

    def cancel(self) -> None:
        self.handle.cancel()


_HEAD, _CHUNKED, _LENGTH, _TO_EOF = 0, 1, 2, 3


class _Exchange:
    """The response parser of one request, fed straight from the connection's data_received."""

    __slots__ = (
        "future",
        "sink",
        "watchdog",
        "buf",
        "mode",
        "status",
        "headers",
        "keep",
        "streamed",
        "left",
        "decoder",
        "parts",
        "size",
        "got",
        "finished",
        "extra",
    )

    def __init__(
        self, future: asyncio.Future[Response], sink: Callable[[bytes], None] | None, watchdog: _Watchdog
    ) -> None:
        self.future, self.sink, self.watchdog = future, sink, watchdog
        self.buf = b""
        self.mode = _HEAD
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep = False
        self.streamed = False
        self.left = 0
        self.decoder: ChunkedDecoder | None = None
        self.parts: list[bytes] = []
        self.size = 0
        self.got = self.finished = self.extra = False

    def feed(self, data: bytes) -> None:
        if self.finished:
            self.extra = True
            return
        self.got = True
        self.watchdog.touch()
        try:
            if self.mode == _HEAD:
                data = self._head(data)
                if not data or self.finished:
                    return
            mode = self.mode
            if mode == _CHUNKED:
                decoder = self.decoder
                out = decoder.feed(data)  # type: ignore[union-attr]
                if out:
                    self._emit(out)
                if decoder.done:  # type: ignore[union-attr]
                    self.keep = self.keep and not decoder.extra  # type: ignore[union-attr]
                    self._finish()
            elif mode == _LENGTH:
                left = self.left
                piece = data[:left] if len(data) > left else data
                self.left = left - len(piece)
                if len(piece) < len(data):
                    self.keep = False
                self._emit(piece)
                if self.left <= 0:
                    self._finish()
            else:
                self._emit(data)
        except Exception as exc:  # noqa: BLE001 — a protocol error, or the sink's own (any: bad JSON in the stream)
            self._fail(exc)

    def _head(self, data: bytes) -> bytes:
        buf = self.buf + data if self.buf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _MAX_HEAD:
                raise RemoteProtocolError("response head too large")
            self.buf = buf
            return b""
        self.buf = b""
        status, version, headers = _parse_head(buf[:end])
        if 100 <= status < 200:
            raise RemoteProtocolError(f"unexpected interim response {status}")
        self.status, self.headers = status, headers
        self.streamed = self.sink is not None and 200 <= status < 300
        conn_hdr = headers.get("connection", "").lower()
        self.keep = ("close" not in conn_hdr) if version == b"HTTP/1.1" else ("keep-alive" in conn_hdr)
        te = headers.get("transfer-encoding", "").lower()
        if te:
            if te != "chunked":
                raise RemoteProtocolError(f"unsupported transfer-encoding {te!r}")
            self.mode, self.decoder = _CHUNKED, ChunkedDecoder()
        elif "content-length" in headers:
            try:
                self.left = int(headers["content-length"])
            except ValueError:
                raise RemoteProtocolError("bad content-length") from None
            if self.left < 0 or (not self.streamed and self.left > _MAX_ERROR_BODY):
                raise RemoteProtocolError(f"content-length {self.left} refused")
            self.mode = _LENGTH
            if self.left == 0:
                self.keep = self.keep and end + 4 == len(buf)
                self._finish()
        elif status in (204, 304):
            self.keep = self.keep and end + 4 == len(buf)
            self._finish()
        else:
            self.mode, self.keep = _TO_EOF, False
        return buf[end + 4 :]

    def _emit(self, out: bytes) -> None:
        if self.streamed:
            self.sink(out)  # type: ignore[misc]
            return
        self.size += len(out)
        if self.size > _MAX_ERROR_BODY:
            raise RemoteProtocolError("response body too large")
        self.parts.append(out)

    def _finish(self) -> None:
        self.finished = True
        if not self.future.done():
            body = b"" if self.streamed else b"".join(self.parts)
            self.future.set_result(Response(self.status, self.headers, body))

    def _fail(self, exc: BaseException) -> None:
        self.finished, self.keep = True, False
        if not self.future.done():
            self.future.set_exception(exc)

    def closed(self, exc: BaseException | None) -> None:
        """The server closed (EOF) or the connection broke (`exc`), or the watchdog aborted it."""
        self.keep = False
        if self.finished:
            return
        if self.watchdog.fired and self.watchdog.overdue:
            self._fail(ReadTimeout("no complete response in time"))
        elif self.watchdog.fired:
            self._fail(ReadTimeout(f"no data for {self.watchdog.timeout:g}s"))
        elif self.mode == _TO_EOF and exc is None:
            self._finish()
        elif not self.got:
            self._fail(_NoResponse(f"closed before the response{f': {exc}' if exc else ''}"))
        else:
            self._fail(
                RemoteProtocolError("server closed the connection mid-response" + (f": {exc}" if exc else ""))
            )


class _Conn(asyncio.Protocol):
    """One keep-alive connection; its bytes go to the current exchange as they arrive."""

    def __init__(self, key: tuple[str, int]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.dead = False
        self.used = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:  # bytes nobody asked for: the connection is out of step
            self.close()
            return
        exchange.feed(data)

    def eof_received(self) -> bool:
        self.dead = True
        if self.exchange is not None:
            self.exchange.closed(None)
        return False  # let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self.dead = True
        if self.exchange is not None:
            self.exchange.closed(exc)

    def alive(self) -> bool:
        return not self.dead and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.dead = True
        if self.transport is not None:
            self.transport.abort()


@dataclass(frozen=True)
class _Target:
    key: tuple[str, int]
    head: bytes  # request line and fixed headers, up to the Content-Length value


class LeanPool:
    """Keep-alive HTTP/1.1 connections per origin, for plain `http://` URLs. No connection cap: callers
    bound concurrency themselves (the bench engine's workers or semaphore)."""

    def __init__(
        self,
        *,
        timeout_s: float = 300.0,
        connect_timeout_s: float = 10.0,
        headers: Mapping[str, str] | None = None,
        max_idle: int = 1024,
    ) -> None:
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_idle = max_idle
        self._extra = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in (headers or {}).items())
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._targets: dict[tuple[str, str], _Target | None] = {}
        self._closed = False
        self.connections_opened = 0  # for tests and diagnostics

    def handles(self, url: str, method: str = "POST") -> bool:
        """True when this client can send `url` (plain http, no userinfo, no proxy from the environment)."""
        return self._target(method, url) is not None

    def _target(self, method: str, url: str) -> _Target | None:
        cache_key = (method, url)
        try:
            return self._targets[cache_key]
        except KeyError:
            pass
        target = None
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "http" and parts.hostname and "@" not in parts.netloc and not _proxied(parts):
            try:
                port = parts.port or 80
            except ValueError:
                port = None
            if port is not None:
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                host = parts.netloc.removesuffix(":80")
                head = (
                    (
                        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: vtui-bench\r\nAccept: */*\r\n"
                        "Content-Type: application/json\r\n"
                    ).encode("latin-1")
                    + self._extra
                    + b"Content-Length: "
                )
                target = _Target((parts.hostname, port), head)
        self._targets[cache_key] = target
        return target

    async def request(
        self,
        method: str,
        url: str,
        body: bytes = b"",
        sink: Callable[[bytes], None] | None = None,
        timeout_s: float | None = None,
        deadline_s: float | None = None,
    ) -> Response:
        """Send one request. With `sink`, a 2xx body goes to `sink` piece by piece as it arrives (and
        `Response.body` is empty); other bodies are read whole. `timeout_s` (default the pool's) bounds
        each wait for a byte; `deadline_s` the whole request, connect included (ConnectTimeout or
        ReadTimeout): asyncio.wait_for's bound without its task and timer. Raises LeanHTTPError (or
        ValueError for a URL this pool does not handle, or whatever `sink` raised)."""
        target = self._target(method, url)
        if target is None:
            raise ValueError(f"not a plain http URL this client handles: {url}")
        if self._closed:
            raise RuntimeError("LeanPool is closed")
        data = target.head + b"%d\r\n\r\n" % len(body) + body
        timeout = timeout_s or self.timeout_s
        hard = None if deadline_s is None else asyncio.get_running_loop().time() + deadline_s
        conn = self._checkout(target.key)
        if conn is not None:
            try:
                return await self._exchange(conn, data, sink, True, timeout, hard)
            except _StaleConnection:
                pass  # the server closed an idle keep-alive connection: once more on a fresh one
        conn = await self._connect(target.key, hard)
        return await self._exchange(conn, data, sink, False, timeout, hard)

    def _checkout(self, key: tuple[str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.alive():
                return conn
            conn.close()
        return None

    def _checkin(self, conn: _Conn) -> None:
        idle = self._idle.setdefault(conn.key, [])
        if self._closed or len(idle) >= self.max_idle or not conn.alive():
            conn.close()
        else:
            idle.append(conn)

    async def _connect(self, key: tuple[str, int], hard: float | None = None) -> _Conn:
        loop = asyncio.get_running_loop()
        limit = self.connect_timeout_s if hard is None else min(self.connect_timeout_s, hard - loop.time())
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Conn(key), *key), max(0.0, limit)
            )
        except asyncio.TimeoutError:
            raise ConnectTimeout(f"no connection to {key[0]}:{key[1]} within {limit:g}s") from None
        except OSError as exc:
            raise ConnectError(f"{key[0]}:{key[1]}: {exc.strerror or exc}") from None
        self.connections_opened += 1
        return conn

    async def _exchange(
        self,
        conn: _Conn,
        data: bytes,
        sink: Callable[[bytes], None] | None,
        reused: bool,
        timeout: float,
        hard: float | None = None,
    ) -> Response:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Response] = loop.create_future()
        watchdog = _Watchdog(loop, timeout, conn, hard)
        exchange = _Exchange(future, sink, watchdog)
        conn.exchange = exchange
        ok = False
        try:
            conn.transport.write(data)  # type: ignore[union-attr]
            response = await future
            ok = True
            conn.used += 1
            return response
        except _NoResponse as exc:
            if reused:
                raise _StaleConnection() from None
            raise RemoteProtocolError(f"server disconnected without sending a response ({exc})") from None
        finally:
            watchdog.cancel()
            conn.exchange = None
            if ok and exchange.keep and not exchange.extra:
                self._checkin(conn)
            else:
                conn.close()

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


def _parse_head(head: bytes) -> tuple[int, bytes, dict[str, str]]:
    lines = head.split(b"\r\n")
    try:
        version, code = lines[0].split(b" ", 2)[:2]
        status = int(code)
    except ValueError:
        raise RemoteProtocolError(f"bad status line {lines[0][:80]!r}") from None
    if not version.startswith(b"HTTP/1."):
        raise RemoteProtocolError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return status, version, headers


def _proxied(parts: urllib.parse.SplitResult) -> bool:
    """Would httpx (trust_env) route this URL through a proxy from the environment?"""
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get("http") or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(parts.netloc, proxies)  # type: ignore[attr-defined]
