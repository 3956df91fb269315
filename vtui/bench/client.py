"""One streaming OpenAI-compatible request, timed on the client: TTFT (first content chunk), the gaps
between chunks (ITL), end-to-end latency, and token counts from the server's `usage`.

Kept lean on purpose — the client must not be the bottleneck: plain `http://` requests go through
`lean_http` (asyncio streams, keep-alive pool; ~5x less CPU per token than httpx), everything else through
one shared HTTP/1.1 httpx AsyncClient; the SSE stream is parsed on bytes, and JSON decoded only for the
lines that can matter. `VTUI_BENCH_HTTP=httpx` forces httpx everywhere (for comparisons).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from vtui.bench.lean_http import LeanHTTPError, LeanPool
from vtui.bench.types import BenchConfig, RequestRecord

_WORDS = (
    "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches "
    "on distant planets near bright moons and cold rivers"
).split()


class BenchClient(httpx.AsyncClient):
    """An httpx AsyncClient that also carries a `LeanPool` (`lean`, None for https clients or with
    VTUI_BENCH_HTTP=httpx); `send` streams plain-http requests through the pool. Closing closes both."""

    lean: LeanPool | None = None

    async def aclose(self) -> None:
        if self.lean is not None:
            await self.lean.aclose()
        await super().aclose()

    async def __aexit__(self, *exc: object) -> None:
        if self.lean is not None:
            await self.lean.aclose()
        await super().__aexit__(*exc)  # type: ignore[arg-type]


def make_client(
    concurrency: int, timeout_s: float, api_key: str | None = None, https: bool = True
) -> httpx.AsyncClient:
    """One client with a connection per concurrent request (HTTP/1.1 keep-alive); plain-HTTP clients
    skip loading the CA bundle and get the lean pool (same timeouts: 10 s connect, `timeout_s` without
    a byte)."""
    limits = httpx.Limits(
        max_connections=max(16, concurrency + 8), max_keepalive_connections=max(16, concurrency + 8)
    )
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    client = BenchClient(
        limits=limits,
        timeout=httpx.Timeout(timeout_s, connect=10.0),
        headers=headers,
        http1=True,
        http2=False,
        verify=https,
    )
    if not https and os.environ.get("VTUI_BENCH_HTTP", "").lower() != "httpx":
        client.lean = LeanPool(timeout_s=timeout_s, connect_timeout_s=10.0, headers=headers)
    return client


def _jsonl_prompts(path: Path) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}:{n}: not JSON: {exc}") from None
        if isinstance(value, str):
            value = {"prompt": value}
        if not isinstance(value, dict) or not ({"prompt", "messages"} & value.keys()):
            raise ValueError(f'{path}:{n}: expected a string or an object with "prompt" or "messages"')
        items.append(value)
    if not items:
        raise ValueError(f"{path}: no prompts")
    return items


def payloads(config: BenchConfig, model: str) -> Iterator[dict[str, Any]]:
    """An endless, seeded stream of request bodies. Synthetic prompts are random token ids (exact input
    length, no prefix-cache hits) for completions, random words for chat."""
    rng = random.Random(config.seed)
    file_items = _jsonl_prompts(config.prompts_file) if config.prompts_file else None
    ids = range(*config.token_id_range)
    index = 0
    lengths = random.Random(config.seed + 7)  # its own stream: fixed lengths keep the prompts of before

    def length(mean: int, stddev: float) -> int:
        return mean if stddev <= 0 else max(1, round(lengths.gauss(mean, stddev)))

    while True:
        body: dict[str, Any] = {
            "model": model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": length(config.output_len, config.output_len_stddev),
            "ignore_eos": True,
        }
        input_len = length(config.input_len, config.input_len_stddev)
        if file_items is not None:
            item = file_items[index % len(file_items)]
            index += 1
            body.update({k: v for k, v in item.items() if k in ("prompt", "messages", "max_tokens")})
            if "max_tokens" in item:
                body["ignore_eos"] = item.get("ignore_eos", True)
        elif config.endpoint == "chat":
            words = " ".join(rng.choice(_WORDS) for _ in range(input_len))
            body["messages"] = [{"role": "user", "content": words}]
        else:
            body["prompt"] = rng.choices(ids, k=input_len)
        yield body


def _error_text(status: int, body: bytes) -> str:
    try:
        data = json.loads(body)
        message = data.get("message") or (data.get("error") or {}).get("message") or str(data)
    except (ValueError, AttributeError):
        message = body[:200].decode("utf-8", "replace")
    return f"HTTP {status}: {str(message)[:200]}"


class _Stream:
    """Per-request SSE state: token event times, usage, error. Works on raw bytes, one network read at
    a time (each read's arrival time stamps every event in it), to keep the client's CPU per token low."""

    __slots__ = ("chat", "first", "last", "gaps", "usage", "chunks", "error", "_buf")

    def __init__(self, chat: bool, start: float) -> None:
        self.chat = chat
        self.first: float | None = None
        self.last = start
        self.gaps: list[float] = []
        self.usage: dict[str, Any] | None = None
        self.chunks = 0
        self.error: str | None = None
        self._buf = b""

    def feed(self, raw: bytes, now: float) -> None:
        buf = self._buf + raw if self._buf else raw
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._buf = buf
            return
        self._buf = buf[end + 2 :]
        block = buf[:end]
        if (
            self.chat
            or self.error is not None
            or b'"usage":' in block
            or b'"usage": ' in block
            or b'"error"' in block
        ):
            for line in block.split(b"\n"):
                if line.startswith(b"data:"):
                    self._event(line[5:].strip(), now)
            return
        # Fast path (completions, plain token events): count them; all share this read's time, exactly
        # as one _event call each would record them (the first at `now`, the rest 0 s after it).
        n = block.count(b"\ndata:") + block.startswith(b"data:") - block.endswith(b"[DONE]")
        if n <= 0:
            return
        self.chunks += n
        if self.first is None:
            self.first = now
        else:
            self.gaps.append(now - self.last)
        if n > 1:
            self.gaps.extend([0.0] * (n - 1))
        self.last = now

    def _event(self, data: bytes, now: float) -> None:
        if data == b"[DONE]" or self.error is not None:
            return
        if self.chat or b'"usage":{' in data or b'"usage": {' in data or b'"error"' in data:
            event = json.loads(data)
            if event.get("error"):
                err = event["error"]
                self.error = "stream error: " + str(err.get("message", err) if isinstance(err, dict) else err)
                return
            self.usage = event.get("usage") or self.usage
            choices = event.get("choices")
            if not choices:
                return
            if self.chat and not (choices[0].get("delta") or {}).get("content"):
                return
        self.chunks += 1
        if self.first is None:
            self.first = now
        else:
            self.gaps.append(now - self.last)
        self.last = now


async def send(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> RequestRecord:
    """POST one streaming request and time it. Never raises: failures come back as ok=False.

    Like `vllm bench serve`, every chunk carrying choices counts as a token event (chat: only chunks
    with content, so the role-only first chunk does not shorten TTFT). The body is read to its end
    even after [DONE], or the keep-alive connection would be dropped."""
    lean = getattr(client, "lean", None)
    if lean is not None and lean.handles(url):
        return await _send_lean(lean, url, body)
    start = time.perf_counter()
    stream = _Stream("messages" in body, start)
    clock = time.perf_counter
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                raw = await response.aread()
                return RequestRecord(False, start, clock(), error=_error_text(response.status_code, raw))
            async for raw in response.aiter_bytes():
                stream.feed(raw, clock())
    except (httpx.HTTPError, OSError, ValueError) as exc:
        return RequestRecord(False, start, clock(), error=f"{type(exc).__name__}: {exc}"[:200])
    return _finished(stream, start, clock())


async def _send_lean(pool: LeanPool, url: str, body: dict[str, Any]) -> RequestRecord:
    data = json.dumps(body, separators=(",", ":")).encode()
    clock = time.perf_counter
    start = clock()
    stream = _Stream("messages" in body, start)
    feed = stream.feed

    def sink(raw: bytes) -> None:
        feed(raw, clock())

    try:
        response = await pool.request("POST", url, data, sink)
    except (LeanHTTPError, OSError, ValueError) as exc:
        return RequestRecord(False, start, clock(), error=f"{type(exc).__name__}: {exc}"[:200])
    end = clock()
    if response.status != 200:
        return RequestRecord(False, start, end, error=_error_text(response.status, response.body))
    return _finished(stream, start, end)


def _finished(stream: _Stream, start: float, end: float) -> RequestRecord:
    """The record of a stream that ended with HTTP 200 (the same for the lean and the httpx path)."""
    if stream.error is not None:
        return RequestRecord(False, start, end, error=stream.error[:200])
    if stream.first is None:
        return RequestRecord(False, start, end, error="no tokens streamed")
    usage = stream.usage or {}
    return RequestRecord(
        True,
        start,
        end,
        ttft=stream.first - start,
        itls=tuple(stream.gaps),
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or stream.chunks),
    )


async def _lean_get_json(client: httpx.AsyncClient, url: str, timeout_s: float) -> object | None:
    """GET `url` through the client's lean pool when it has one (so these lookups share the bench's
    keep-alive connections); None on any failure, for the caller to redo it with httpx and raise its
    usual errors."""
    lean = getattr(client, "lean", None)
    if lean is None or not lean.handles(url, "GET"):
        return None
    try:
        response = await lean.request("GET", url, timeout_s=timeout_s)
        return json.loads(response.body) if response.status == 200 else None
    except (LeanHTTPError, OSError, ValueError):
        return None


async def served_model(client: httpx.AsyncClient, base_url: str) -> str:
    """The first model id the server lists."""
    url = f"{base_url}/v1/models"
    body = await _lean_get_json(client, url, 10.0)
    if not isinstance(body, dict):
        response = await client.get(url, timeout=10.0)
        response.raise_for_status()
        body = response.json()
    data = body.get("data") or []
    if not data:
        raise ValueError(f"{base_url}/v1/models lists no model")
    return str(data[0]["id"])


async def server_version(client: httpx.AsyncClient, base_url: str) -> str | None:
    url = f"{base_url}/version"
    body = await _lean_get_json(client, url, 5.0)
    if isinstance(body, dict) and body.get("version") is not None:
        return str(body["version"])
    try:
        response = await client.get(url, timeout=5.0)
        return str(response.json().get("version")) if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
