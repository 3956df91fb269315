"""The sim's OpenAI-compatible HTTP/1.1 server on bare asyncio streams (fast, no dependencies):
/health, /version, /v1/models, /v1/completions, /v1/chat/completions (SSE streaming with usage, or one JSON
body), /metrics, and vLLM's API-key check (401 on /v1 paths). With VLLM_SERVER_DEV_MODE=1 (`dev_mode`),
vLLM 0.32's sleep-mode routes: POST /sleep?level=0|1|2&mode=abort|wait|keep, POST /wake_up[?tags=…],
GET /is_sleeping (a request sent while asleep waits for the wake, as vLLM queues it). Access lines in uvicorn's format. HEAD is
answered wherever GET is, with GET's headers and no body (RFC 9110 §9.3.2); a 405 names the allowed
methods in `allow`.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from vtui.sim.engine import PAUSE_MODES, Engine, WakeFailed, prompt_hashes
from vtui.sim.httpmetrics import HttpMetrics
from vtui.sim.scheduler import Request

WORDS = [
    " the",
    " model",
    " token",
    " of",
    " a",
    " cache",
    " and",
    " GPU",
    " is",
    " to",
    " batch",
    " in",
    " vLLM",
    " memory",
    " fast",
    " we",
    " request",
    " with",
    " block",
    " serve",
    ".",
    ",",
    " it",
    " for",
]
_WORDS_JSON = [json.dumps(w)[1:-1] for w in WORDS]
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
}


@dataclass
class ServerConfig:
    served_names: list[str]
    model: str
    max_model_len: int
    block_size: int
    api_keys: list[str]
    version: str
    access_log: bool = True
    seed: int = 0
    dev_mode: bool = False  # VLLM_SERVER_DEV_MODE: the sleep-mode routes exist


SLEEP_ROUTES = {"/sleep": "POST", "/wake_up": "POST", "/is_sleeping": "GET"}
KNOWN_ROUTES = frozenset({"/v1/models", "/v1/completions", "/v1/chat/completions"})  # counted by HttpMetrics


def count_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def _query_error(kind: str, name: str, msg: str, value: str, ctx: dict | None = None) -> bytes:
    """vLLM 0.32's 400 answer to a bad query parameter (its validation handler over FastAPI's error)."""
    item: dict = {"type": kind, "loc": f"query.{name}", "msg": msg, "input": value}
    if ctx:
        item["ctx"] = ctx
    return _error(f"1 validation error:\n  {item!r}", "Bad Request", 400, f"query.{name}")


def _error(message: str, kind: str, code: int, param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}}).encode()


class SimServer:
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
                    status = await self.route(
                        "GET" if method == "HEAD" else method, path, headers, body, writer
                    )
                finally:
                    self._head.discard(writer)
                if path in KNOWN_ROUTES:
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
        ctype: str = "application/json",
        allow: str | None = None,
    ) -> int:
        head = writer in self._head
        self._sent[writer] = 0 if head else len(body)
        extra = f"allow: {allow}\r\n" if allow else ""
        writer.write(
            f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nserver: uvicorn\r\ncontent-type: {ctype}\r\n"
            f"{extra}content-length: {len(body)}\r\n\r\n".encode()
            + (b"" if head else body)
        )
        return status

    async def route(
        self, method: str, path: str, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter
    ) -> int:
        if self.cfg.api_keys and path.startswith(("/v1", "/v2", "/inference")):
            auth = headers.get("authorization", "")
            if not any(auth == f"Bearer {k}" for k in self.cfg.api_keys):
                return self.respond(writer, 401, b'{"error":"Unauthorized"}')
        if path in ("/health", "/ping", "/load") and method in ("GET", "POST"):
            if path == "/load":
                return self.respond(writer, 200, json.dumps({"server_load": self.in_flight}).encode())
            return self.respond(writer, 200, b"", "application/json")
        if path == "/version":
            return self.respond(writer, 200, json.dumps({"version": self.cfg.version}).encode())
        if path == "/metrics":
            return self.respond(
                writer, 200, self.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8"
            )
        if self.cfg.dev_mode and path in SLEEP_ROUTES:
            if method != SLEEP_ROUTES[path]:
                return self.respond(writer, 405, b'{"detail":"Method Not Allowed"}', allow=SLEEP_ROUTES[path])
            return await self.sleep_route(path, self._query.get(writer, {}), writer)
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
        if path in ("/v1/completions", "/v1/chat/completions"):
            if method != "POST":
                return self.respond(writer, 405, b'{"detail":"Method Not Allowed"}', allow="POST")
            self.in_flight += 1
            try:
                return await self.generate(path.endswith("chat/completions"), body, writer)
            finally:
                self.in_flight -= 1
        return self.respond(writer, 404, b'{"detail":"Not Found"}')

    # -- sleep mode -----------------------------------------------------------------------------
    async def sleep_route(self, path: str, query: dict[str, list[str]], writer: asyncio.StreamWriter) -> int:
        """vLLM 0.32's entrypoints/serve/dev/sleep routes, with their answers."""
        if path == "/is_sleeping":
            return self.respond(writer, 200, json.dumps({"is_sleeping": self.engine.is_sleeping()}).encode())
        if path == "/wake_up":
            tags = query.get("tags") or None
            self.log_raw(f"INFO:     wake up the engine with tags: {tags}")
            try:
                awake = await self.engine.wake_up(tags)
            except WakeFailed as exc:
                return self.respond(writer, 500, _error(str(exc), "InternalServerError", 500))
            answer = {"status": "awake" if awake else "sleeping", "tags": tags}
            return self.respond(writer, 200, json.dumps(answer).encode())
        raw_level = (query.get("level") or ["1"])[-1]
        mode = (query.get("mode") or ["abort"])[-1]
        try:
            level = int(raw_level)
        except ValueError:
            body = _query_error(
                "int_parsing",
                "level",
                "Input should be a valid integer, unable to parse string as an integer",
                raw_level,
            )
            return self.respond(writer, 400, body)
        if level < 0 or level > 2:
            kind, op, bound = (
                ("greater_than_equal", "greater", 0) if level < 0 else ("less_than_equal", "less", 2)
            )
            body = _query_error(
                kind,
                "level",
                f"Input should be {op} than or equal to {bound}",
                raw_level,
                {"ge" if level < 0 else "le": bound},
            )
            return self.respond(writer, 400, body)
        if mode not in PAUSE_MODES:
            body = _query_error(
                "literal_error",
                "mode",
                "Input should be 'abort', 'wait' or 'keep'",
                mode,
                {"expected": "'abort', 'wait' or 'keep'"},
            )
            return self.respond(writer, 400, body)
        await self.engine.sleep(level, mode)
        return self.respond(writer, 200, json.dumps({"status": "sleeping", "level": level}).encode())

    # -- generation -----------------------------------------------------------------------------
    async def generate(self, chat: bool, body: bytes, writer: asyncio.StreamWriter) -> int:
        try:
            payload = json.loads(body or b"{}")
            assert isinstance(payload, dict)
        except (ValueError, AssertionError):
            return self.respond(writer, 400, _error("Invalid JSON body", "BadRequestError", 400))
        name = payload.get("model") or self.cfg.served_names[0]
        if name not in self.cfg.served_names and name != self.cfg.model:
            return self.respond(
                writer, 404, _error(f"The model `{name}` does not exist.", "NotFoundError", 404, "model")
            )
        if chat:
            messages = payload.get("messages") or []
            if not isinstance(messages, list):
                return self.respond(writer, 400, _error("messages must be a list", "BadRequestError", 400))
            key = "".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            prompt_len = count_tokens(key) + 4 * len(messages) + 3
        else:
            prompt = payload.get("prompt", "")
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
                key, prompt_len = ",".join(map(str, prompt)), len(prompt)
            else:
                key = prompt if isinstance(prompt, str) else "".join(map(str, prompt))
                prompt_len = count_tokens(key)
        limit = self.cfg.max_model_len
        max_tokens = payload.get("max_completion_tokens") or payload.get("max_tokens")
        if max_tokens is None:
            max_tokens = 16 if not chat else limit - prompt_len
        try:
            max_tokens = int(max_tokens)
        except (TypeError, ValueError):
            return self.respond(writer, 400, _error("max_tokens must be an integer", "BadRequestError", 400))
        if prompt_len + max(0, max_tokens) > limit or max_tokens < 1:
            msg = (
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the messages, {max_tokens} in the "
                "completion). Please reduce the length of the messages or completion."
            )
            if max_tokens < 1:
                msg = f"max_tokens must be at least 1, got {max_tokens}."
            return self.respond(writer, 400, _error(msg, "BadRequestError", 400))
        stream = bool(payload.get("stream"))
        include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        seed = hash(key) & 0xFFFF
        stop_at = 1 << 30 if payload.get("ignore_eos") else 8 + (seed * 2654435761) % 600
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        pieces: list[str] = []
        head = (
            f'data: {{"id":"{rid}","object":"{"chat.completion.chunk" if chat else "text_completion"}",'
            f'"created":{created},"model":{json.dumps(name)},"choices":[{{"index":0,'
        )
        if chat:
            mid, tail = '"delta":{"content":"', '"},"logprobs":null,"finish_reason":null}]}\n\n'
        else:
            mid, tail = '"text":"', '","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'

        def on_output(req: Request, n: int, reason: str | None) -> None:
            i = req.output_len - 1
            if stream:
                if writer.is_closing():
                    if not done.done():
                        done.set_result("gone")
                    return
                chunk = ""
                if n:
                    chunk = head + mid + _WORDS_JSON[(seed + i) % len(WORDS)] + tail
                if reason:
                    chunk += self.final_chunks(chat, rid, created, name, reason, req, include_usage)
                if chunk:
                    data = chunk.encode()
                    writer.write(b"%x\r\n%b\r\n" % (len(data), data))
            elif n:
                pieces.append(WORDS[(seed + i) % len(WORDS)])
            if reason and not done.done():
                done.set_result(reason)

        req = Request(
            rid,
            prompt_len,
            max_tokens,
            time.monotonic(),
            stop_at=stop_at,
            block_hashes=prompt_hashes(key, prompt_len, self.cfg.block_size),
            on_output=on_output,
        )
        if stream:
            writer.write(
                b"HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            if chat:
                first = (
                    head
                    + '"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
                )
                data = first.encode()
                writer.write(b"%x\r\n%b\r\n" % (len(data), data))
        self.engine.add(req)
        try:
            reason = await done
        except asyncio.CancelledError:
            self.engine.abort(req)
            raise
        if reason == "gone":
            self.engine.abort(req)
            return 200
        if stream:
            writer.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
            try:
                await writer.drain()
            except ConnectionError:
                pass
            return 200
        usage = {
            "prompt_tokens": req.prompt_len,
            "total_tokens": req.prompt_len + req.output_len,
            "completion_tokens": req.output_len,
            "prompt_tokens_details": None,
        }
        text = "".join(pieces)
        if chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = "text_completion"
        out = {
            "id": rid,
            "object": obj,
            "created": created,
            "model": name,
            "choices": [choice],
            "usage": usage,
        }
        return self.respond(writer, 200, json.dumps(out).encode())

    @staticmethod
    def final_chunks(
        chat: bool, rid: str, created: int, name: str, reason: str, req: Request, include_usage: bool
    ) -> str:
        obj = "chat.completion.chunk" if chat else "text_completion"
        if chat:
            choice = {
                "index": 0,
                "delta": {"content": ""},
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
        else:
            choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": reason, "stop_reason": None}
        out = (
            "data: "
            + json.dumps(
                {"id": rid, "object": obj, "created": created, "model": name, "choices": [choice]},
                separators=(",", ":"),
            )
            + "\n\n"
        )
        if include_usage:
            usage = {
                "prompt_tokens": req.prompt_len,
                "total_tokens": req.prompt_len + req.output_len,
                "completion_tokens": req.output_len,
            }
            out += (
                "data: "
                + json.dumps(
                    {
                        "id": rid,
                        "object": obj,
                        "created": created,
                        "model": name,
                        "choices": [],
                        "usage": usage,
                    },
                    separators=(",", ":"),
                )
                + "\n\n"
            )
        return out
