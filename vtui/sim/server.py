"""The sim's OpenAI-compatible HTTP/1.1 server on bare asyncio streams (fast, no dependencies):
/health, /version, /v1/models, /v1/completions, /v1/chat/completions (SSE streaming with usage, or one JSON
body), /v1/responses (text in, one message out), /tokenize, /detokenize, /metrics, and vLLM's API-key check
(401 on /v1 paths). Request checks and answer shapes are vLLM 0.32's (vtui.sim.openai). With VLLM_SERVER_DEV_MODE=1 (`dev_mode`),
vLLM 0.32's sleep-mode routes: POST /sleep?level=0|1|2&mode=abort|wait|keep, POST /wake_up[?tags=…],
GET /is_sleeping (a request sent while asleep waits for the wake, as vLLM queues it). Access lines in uvicorn's format. As in
vLLM (FastAPI routes), a method a route does not list is a 405 naming the allowed one in `allow` -- HEAD
included, answered without a body; only /metrics (a mounted app) answers every method.
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
from vtui.sim.openai import (
    Params,
    body,
    chat_choice,
    chat_logprobs,
    completion_choice,
    completion_logprobs,
    fingerprint,
    json_error,
    missing,
    model_not_found,
    parse,
    usage,
    validation_error,
)
from vtui.sim.scheduler import Request
from vtui.sim.tokens import ESTIMATE, WORDS, Counter

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
    counter: Counter = ESTIMATE  # how prompts are counted (vtui.sim.tokens)


# Which count the sim used, on every answer (vLLM's bodies have no room for it): "tokenizer" or "estimate"
COUNT_HEADER = "x-vtui-sim-token-count"


SLEEP_ROUTES = {"/sleep": "POST", "/wake_up": "POST", "/is_sleeping": "GET"}
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
                    status = await self.route(method, path, headers, body, writer)
                finally:
                    self._head.discard(writer)
                if path in KNOWN_ROUTES or (self.cfg.dev_mode and path in SLEEP_ROUTES):
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
        extra = f"allow: {allow}\r\n" if allow else ""
        extra += f"{COUNT_HEADER}: {self.cfg.counter.kind}\r\n"
        extra += f"content-type: {ctype}\r\n" if ctype else ""
        writer.write(
            f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nserver: uvicorn\r\n"
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
        if path == "/metrics":  # prometheus' app, mounted: every method
            return self.respond(
                writer, 200, self.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8"
            )
        allowed = ROUTES.get(path) or (SLEEP_ROUTES.get(path) if self.cfg.dev_mode else None)
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
        if path in SLEEP_ROUTES:
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
        if path in ("/tokenize", "/detokenize"):
            return self.respond(writer, *self.tokenize(path == "/tokenize", body))
        self.in_flight += 1
        try:
            if path == "/v1/responses":
                return await self.responses(body, writer)
            return await self.generate(path.endswith("chat/completions"), body, writer)
        finally:
            self.in_flight -= 1

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
    async def generate(self, chat: bool, raw: bytes, writer: asyncio.StreamWriter) -> int:
        """/v1/completions and /v1/chat/completions as vLLM 0.32 answers them: one choice per prompt
        and sample (`n`), index in order; a stream's last token chunk carries its finish_reason."""
        try:
            payload = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            return self.respond(writer, 400, json_error(exc))
        if not isinstance(payload, dict):
            return self.respond(writer, 400, _error("Invalid JSON body", "BadRequestError", 400))
        asked = payload.get("model")
        if asked and asked not in self.cfg.served_names:  # vLLM: the served names only, not the model's path
            return self.respond(writer, 404, model_not_found(str(asked), self.cfg.served_names))
        name = self.cfg.served_names[0]  # vLLM answers with its first served name, whichever alias was asked
        params = parse(payload, chat, self.cfg.max_model_len, self.cfg.counter)
        if isinstance(params, bytes):
            return self.respond(writer, 400, params)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        n = params.n
        count = len(params.prompts) * n
        texts: list[list[str]] = [[] for _ in range(count)]
        reasons: list[str | None] = [None] * count
        finished = [0]
        obj = "chat.completion.chunk" if chat else "text_completion"
        top = f'"id":"{rid}","object":"{obj}","created":{created},"model":{json.dumps(name)}'
        stream, k = params.stream, params.logprobs
        last_extra = (
            "" if params.include_usage else f',"system_fingerprint":"{fingerprint(self.cfg.version)}"'
        )

        def chunk(index: int, seed: int, i: int, token: str | None, reason: str | None) -> str:
            text = "" if token is None else _WORDS_JSON[(seed + i) % len(WORDS)]
            lp = "null"
            if k is not None and token is not None:
                lp = json.dumps(
                    chat_logprobs(seed, i, [token], k)
                    if chat
                    else completion_logprobs(seed, i, [token], k, sum(map(len, texts[index][:-1])))
                )
            fin = "null" if reason is None else f'"{reason}"'
            tail = ',"stop_reason":null' if reason else ""
            if chat:
                choice = f'"delta":{{"content":"{text}"}},"logprobs":{lp},"finish_reason":{fin}{tail},"token_ids":null'
            else:
                choice = (
                    f'"text":"{text}","logprobs":{lp},"finish_reason":{fin},"stop_reason":null,'
                    '"prompt_token_ids":null,"token_ids":null'
                )
            extra = last_extra if reason else ""
            return f'data: {{{top},"choices":[{{"index":{index},{choice}}}]{extra}}}\n\n'

        def watcher(index: int, seed: int) -> Callable[[Request, int, str | None], None]:
            def on_output(req: Request, new: int, reason: str | None) -> None:
                i = req.output_len - 1
                token = WORDS[(seed + i) % len(WORDS)] if new else None
                if token is not None:
                    texts[index].append(token)
                if stream:
                    if writer.is_closing():
                        if not done.done():
                            done.set_result("gone")
                        return
                    if new or reason:
                        data = chunk(index, seed, i, token, reason).encode()
                        writer.write(b"%x\r\n%b\r\n" % (len(data), data))
                if reason:
                    reasons[index] = reason
                    finished[0] += 1
                    if finished[0] == count and not done.done():
                        done.set_result(reason)

            return on_output

        requests: list[Request] = []
        seeds: list[int] = []
        for p, prompt in enumerate(params.prompts):
            for j in range(n):
                seed = (hash(prompt.key) + j * 7919) & 0xFFFF
                stop_at = 1 << 30 if params.ignore_eos else 8 + (seed * 2654435761) % 600
                seeds.append(seed)
                requests.append(
                    Request(
                        f"{rid}-{p}-{j}" if count > 1 else rid,
                        prompt.length,
                        params.max_tokens[p],
                        time.monotonic(),
                        stop_at=stop_at,
                        block_hashes=prompt_hashes(prompt.key, prompt.length, self.cfg.block_size),
                        on_output=watcher(len(requests), seed),
                        n=n,
                    )
                )
        if stream:
            writer.write(
                "HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                f"{COUNT_HEADER}: {self.cfg.counter.kind}\r\ntransfer-encoding: chunked\r\n\r\n".encode()
            )
            if chat:
                for index in range(count):
                    first = (
                        f'data: {{{top},"choices":[{{"index":{index},"delta":{{"role":"assistant","content":""}},'
                        '"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n'
                    )
                    data = first.encode()
                    writer.write(b"%x\r\n%b\r\n" % (len(data), data))
        for req in requests:
            self.engine.add(req)
        try:
            await done
        except asyncio.CancelledError:
            for req in requests:
                self.engine.abort(req)
            raise
        prompt_tokens = sum(prompt.length for prompt in params.prompts)
        completion_tokens = sum(req.output_len for req in requests)
        if done.result() == "gone":
            for req in requests:
                self.engine.abort(req)
            return 200
        if stream:
            tail = ""
            if params.include_usage:
                use = json.dumps(
                    usage(prompt_tokens, completion_tokens, details=False), separators=(",", ":")
                )
                tail = f'data: {{{top},"choices":[],"usage":{use},"system_fingerprint":"{fingerprint(self.cfg.version)}"}}\n\n'
            data = (tail + "data: [DONE]\n\n").encode()
            writer.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data))
            try:
                await writer.drain()
            except ConnectionError:
                pass
            return 200
        return self.respond(
            writer,
            200,
            json.dumps(
                self.answer(
                    chat, rid, created, name, params, texts, reasons, seeds, prompt_tokens, completion_tokens
                )
            ).encode(),
        )

    def answer(
        self,
        chat: bool,
        rid: str,
        created: int,
        name: str,
        params: Params,
        texts: list[list[str]],
        reasons: list[str | None],
        seeds: list[int],
        prompt_tokens: int,
        completion_tokens: int,
    ) -> dict:
        """The one JSON body of a request that did not stream."""
        k = params.logprobs
        choices = []
        for index, tokens in enumerate(texts):
            reason = reasons[index] or "length"
            if chat:
                lp = chat_logprobs(seeds[index], 0, tokens, k) if k is not None else None
                choices.append(chat_choice(index, "".join(tokens), lp, reason))
                continue
            prompt = params.prompts[index // params.n]
            echoed = self.cfg.counter.pieces(prompt.text) if params.echo else []
            lp = None
            if k is not None:
                lp = completion_logprobs(seeds[index], 0, echoed + tokens, k, 0, prompt=len(echoed))
            choice = completion_choice(index, "".join(echoed + tokens), lp, reason)
            if lp is not None and echoed:  # vLLM sends the prompt's logprobs too, keyed by token id
                choice["prompt_logprobs"] = [None] + [
                    {str(sum(piece.encode()) % 32000): {"logprob": v, "rank": 1, "decoded_token": piece}}
                    for piece, v in zip(echoed[1:], lp["token_logprobs"][1 : len(echoed)], strict=True)
                ]
            choices.append(choice)
        return body(
            chat, rid, created, name, choices, usage(prompt_tokens, completion_tokens), self.cfg.version
        )

    def tokenize(self, encode: bool, raw: bytes) -> tuple[int, bytes]:
        """POST /tokenize ({"prompt"} or {"messages"}) and POST /detokenize ({"tokens"}), vLLM 0.32's shapes."""
        try:
            payload = json.loads(raw or b"null")
        except json.JSONDecodeError as exc:
            return 400, json_error(exc)
        if not isinstance(payload, dict):
            payload = {}
        if not encode:
            tokens = payload.get("tokens")
            if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
                return 400, validation_error([missing("tokens", payload)])
            return 200, json.dumps({"prompt": self.cfg.counter.decode(tokens)}).encode()
        if "prompt" in payload:
            ids = self.cfg.counter.encode(str(payload["prompt"]))
        elif isinstance(payload.get("messages"), list):
            count = self.cfg.counter.chat(payload["messages"])
            ids = (
                self.cfg.counter.encode(
                    "".join(str(m.get("content", "")) for m in payload["messages"] if isinstance(m, dict)),
                    special=False,
                )
                + [1] * count
            )[:count]  # the count is the template's; the ids the contents'
        else:
            return 400, validation_error([missing("prompt", payload), missing("messages", payload)])
        count = len(ids)
        answer = {"count": count, "max_model_len": self.cfg.max_model_len, "tokens": ids, "token_strs": None}
        return 200, json.dumps(answer).encode()

    async def responses(self, raw: bytes, writer: asyncio.StreamWriter) -> int:
        """POST /v1/responses, the basic form: text (or messages) in, one assistant message out; no stream."""
        try:
            payload = json.loads(raw) if raw else None
        except json.JSONDecodeError as exc:
            return self.respond(writer, 400, json_error(exc))
        if payload is None:
            return self.respond(
                writer,
                400,
                validation_error(
                    [{"type": "missing", "loc": "body", "msg": "Field required", "input": "None"}]
                ),
            )
        if not isinstance(payload, dict) or "input" not in payload:
            return self.respond(writer, 400, validation_error([missing("input", payload or {})]))
        given = payload["input"]
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else given
        chat: dict = {"model": payload.get("model"), "messages": messages}
        if payload.get("max_output_tokens") is not None:
            chat["max_tokens"] = payload["max_output_tokens"]
        for key in ("temperature", "top_p"):
            if payload.get(key) is not None:
                chat[key] = payload[key]
        sink = _Sink()
        status = await self.generate(True, json.dumps(chat).encode(), sink)  # type: ignore[arg-type]
        self._sent.pop(sink, None)  # type: ignore[call-overload]
        if status != 200:
            return self.respond(writer, status, sink.body)
        done = json.loads(sink.body)
        choice, use = done["choices"][0], done["usage"]
        complete = choice["finish_reason"] != "length"
        answer = {
            "id": "resp_" + uuid.uuid4().hex[:16],
            "created_at": done["created"],
            "incomplete_details": None if complete else {"reason": "max_output_tokens"},
            "instructions": payload.get("instructions"),
            "metadata": payload.get("metadata"),
            "model": done["model"],
            "object": "response",
            "output": [
                {
                    "id": "msg_" + uuid.uuid4().hex[:16],
                    "content": [
                        {
                            "annotations": [],
                            "text": choice["message"]["content"],
                            "type": "output_text",
                            "logprobs": None,
                        }
                    ],
                    "role": "assistant",
                    "status": "completed",
                    "type": "message",
                    "phase": None,
                }
            ],
            "parallel_tool_calls": True,
            "temperature": float(payload.get("temperature", 1.0)),
            "tool_choice": "none",
            "tools": [],
            "top_p": float(payload.get("top_p", 1.0)),
            "background": False,
            "max_output_tokens": payload.get("max_output_tokens"),
            "max_tool_calls": None,
            "previous_response_id": None,
            "prompt": None,
            "reasoning": None,
            "service_tier": "auto",
            "status": "completed" if complete else "incomplete",
            "text": None,
            "top_logprobs": None,
            "truncation": "disabled",
            "usage": {
                "input_tokens": use["prompt_tokens"],
                "input_tokens_details": {
                    "cached_tokens": 0,
                    "cache_write_tokens": 0,
                    "input_tokens_per_turn": [],
                    "cached_tokens_per_turn": [],
                },
                "output_tokens": use["completion_tokens"],
                "output_tokens_details": {
                    "reasoning_tokens": 0,
                    "tool_output_tokens": 0,
                    "output_tokens_per_turn": [],
                    "tool_output_tokens_per_turn": [],
                },
                "total_tokens": use["total_tokens"],
            },
            "user": None,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "input_messages": None,
            "output_messages": None,
        }
        return self.respond(writer, 200, json.dumps(answer).encode())


class _Sink:
    """A writer that keeps the one answer `generate` writes (for /v1/responses, which wraps it)."""

    def __init__(self) -> None:
        self.body = b""

    def write(self, data: bytes) -> None:
        self.body = data.split(b"\r\n\r\n", 1)[-1]

    def is_closing(self) -> bool:
        return False
