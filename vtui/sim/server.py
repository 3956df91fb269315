"""The sim's OpenAI-compatible HTTP/1.1 server on bare asyncio streams (fast, no dependencies):
/health, /version, /v1/models, /v1/completions, /v1/chat/completions (SSE streaming with usage, or one JSON
body), /v1/responses (text in, one message out), /tokenize, /detokenize, /metrics, and vLLM's API-key check
(401 on /v1 paths). Request checks and answer shapes are vLLM 0.32's (vtui.sim.openai). With VLLM_SERVER_DEV_MODE=1 (`dev_mode`),
vLLM 0.32's sleep-mode routes: POST /sleep?level=0|1|2&mode=abort|wait|keep, POST /wake_up[?tags=…],
GET /is_sleeping (a request sent while asleep waits for the wake, as vLLM queues it). Access lines in uvicorn's format. As in
vLLM (FastAPI routes), a method a route does not list is a 405 naming the allowed one in `allow` -- HEAD
included, answered without a body; only /metrics (a mounted app) answers every method.

`SimServer` reads requests, routes them and writes the answers; the routes are parts: the generating
ones (vtui.sim.completions), the sleep-mode ones (vtui.sim.sleeproutes), /tokenize and /detokenize
(vtui.sim.openai); what they share, the settings and HTTP's framing, is vtui.sim.wire.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from collections.abc import Callable

from vtui.sim import sleeproutes, wire
from vtui.sim.completions import Completions
from vtui.sim.engine import Engine
from vtui.sim.httpmetrics import HttpMetrics
from vtui.sim.openai import tokenize
from vtui.sim.wire import REASONS, ServerConfig

# vLLM 0.32's routes and the methods each allows (FastAPI adds no HEAD: HEAD /health is a 405 there)
ROUTES = {
    "/health": "GET",
    "/load": "GET",
    "/ping": "GET, POST",
    "/version": "GET",
    "/v1/models": "GET",
    "/v1/completions": "POST",
    "/v1/chat/completions": "POST",
    "/v1/responses": "POST",
    "/tokenize": "POST",
    "/detokenize": "POST",
}
# counted by HttpMetrics (which leaves out what vLLM's instrumentator excludes): every route above
KNOWN_ROUTES = frozenset(ROUTES)


class SimServer:
    """One connection loop per client: reads each request, answers it through its route's part, writes
    the access line and counts it in `http`."""

    def __init__(
        self,
        cfg: ServerConfig,
        engine: Engine,
        metrics_text: Callable[[], str],
        log_raw: Callable[[str], None],
        http: HttpMetrics | None = None,
    ) -> None:
        self.cfg = cfg
        self.http = http or HttpMetrics()
        self._sent: dict[asyncio.StreamWriter, int] = {}  # Content-Length of the answer being written
        self._head: set[asyncio.StreamWriter] = set()  # connections answering a HEAD: headers only
        self.engine = engine
        self.completions = Completions(cfg, engine)
        self.metrics_text = metrics_text
        self.log_raw = log_raw
        self.created = int(time.time())
        self.connections: set[asyncio.StreamWriter] = set()
        self.in_flight = 0  # HTTP generate requests being answered: what vLLM's /load counts
        self._query: dict[asyncio.StreamWriter, dict[str, list[str]]] = {}  # the request's query string

    # -- plumbing -------------------------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("127.0.0.1", 0)
        self.connections.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, _version = lines[0].split(" ", 2)
                except ValueError:
                    return
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length") or 0)
                body = await reader.readexactly(length) if length else b""
                path, _, query = target.partition("?")
                self._query[writer] = urllib.parse.parse_qs(query, keep_blank_values=True)
                started = time.perf_counter()
                self._sent[writer] = 0  # a streamed answer has no Content-Length: counted 0, as vLLM's
                if method == "HEAD":  # GET's answer without its body
                    self._head.add(writer)
                try:
                    status = await self.route(method, path, headers, body, writer)
                finally:
                    self._head.discard(writer)
                if path in KNOWN_ROUTES or (self.cfg.dev_mode and path in sleeproutes.ROUTES):
                    self.http.record(
                        path, method, status, length, self._sent.get(writer, 0), time.perf_counter() - started
                    )
                if self.cfg.access_log:
                    self.log_raw(
                        f'INFO:     {peer[0]}:{peer[1]} - "{method} {target} HTTP/1.1" {status} {REASONS.get(status, "")}'
                    )
                if headers.get("connection", "").lower() == "close" or writer.is_closing():
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self.connections.discard(writer)
            self._sent.pop(writer, None)
            self._query.pop(writer, None)
            self._head.discard(writer)
            try:
                writer.close()
            except RuntimeError:
                pass

    def respond(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        ctype: str | None = "application/json",
        allow: str | None = None,
    ) -> int:
        head = writer in self._head
        self._sent[writer] = 0 if head else len(body)
        writer.write(
            wire.head(status, self.cfg.counter.kind, len(body), ctype, allow) + (b"" if head else body)
        )
        return status

    async def route(
        self, method: str, path: str, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter
    ) -> int:
        if self.cfg.api_keys and path.startswith(("/v1", "/v2", "/inference")):
            auth = headers.get("authorization", "")
            if not any(auth == f"Bearer {k}" for k in self.cfg.api_keys):
                return self.respond(writer, 401, b'{"error":"Unauthorized"}')
        if path == "/metrics":  # prometheus' app, mounted: every method
            return self.respond(
                writer, 200, self.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8"
            )
        allowed = ROUTES.get(path) or (sleeproutes.ROUTES.get(path) if self.cfg.dev_mode else None)
        if allowed is None:
            return self.respond(writer, 404, b'{"detail":"Not Found"}')
        if method not in allowed.split(", "):
            return self.respond(writer, 405, b'{"detail":"Method Not Allowed"}', allow=allowed.split(", ")[0])
        if path in ("/health", "/ping"):
            return self.respond(writer, 200, b"", None)
        if path == "/load":
            return self.respond(writer, 200, json.dumps({"server_load": self.in_flight}).encode())
        if path == "/version":
            return self.respond(writer, 200, json.dumps({"version": self.cfg.version}).encode())
        if path in sleeproutes.ROUTES:
            query = self._query.get(writer, {})
            return self.respond(writer, *await sleeproutes.answer(self.engine, path, query, self.log_raw))
        if path == "/v1/models":
            data: list[dict[str, object]] = [
                {
                    "id": name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "vllm",
                    "root": self.cfg.model,
                    "parent": None,
                    "max_model_len": self.cfg.max_model_len,
                    "permission": [],
                }
                for name in self.cfg.served_names
            ]
            return self.respond(writer, 200, json.dumps({"object": "list", "data": data}).encode())
        if path in ("/tokenize", "/detokenize"):
            reply = tokenize(path == "/tokenize", body, self.cfg.counter, self.cfg.max_model_len)
            return self.respond(writer, *reply)
        self.in_flight += 1
        try:
            if path == "/v1/responses":
                return self.respond(writer, *await self.completions.responses(body, writer))
            answer = await self.completions.generate(path.endswith("chat/completions"), body, writer)
            return 200 if answer is None else self.respond(writer, *answer)  # None: streamed
        finally:
            self.in_flight -= 1
