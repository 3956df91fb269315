"""One streaming OpenAI-compatible request, timed on the client: TTFT (first content chunk), the gaps
between chunks (ITL), end-to-end latency, and token counts from the server's `usage`.

Kept lean on purpose — the client must not be the bottleneck: one shared HTTP/1.1 AsyncClient, the
SSE stream read line by line, and JSON decoded only for lines that can matter.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from vtui.bench.types import BenchConfig, RequestRecord

_WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches "
          "on distant planets near bright moons and cold rivers").split()


def make_client(concurrency: int, timeout_s: float, api_key: str | None = None,
                https: bool = True) -> httpx.AsyncClient:
    """One AsyncClient with a connection per concurrent request (HTTP/1.1 keep-alive); plain-HTTP
    clients skip loading the CA bundle."""
    limits = httpx.Limits(max_connections=max(16, concurrency + 8), max_keepalive_connections=max(16, concurrency + 8))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout_s, connect=10.0), headers=headers,
                             http1=True, http2=False, verify=https)


def _jsonl_prompts(path: Path) -> list[dict]:
    items: list[dict] = []
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
            raise ValueError(f"{path}:{n}: expected a string or an object with \"prompt\" or \"messages\"")
        items.append(value)
    if not items:
        raise ValueError(f"{path}: no prompts")
    return items


def payloads(config: BenchConfig, model: str) -> Iterator[dict]:
    """An endless, seeded stream of request bodies. Synthetic prompts are random token ids (exact input
    length, no prefix-cache hits) for completions, random words for chat."""
    rng = random.Random(config.seed)
    file_items = _jsonl_prompts(config.prompts_file) if config.prompts_file else None
    ids = range(*config.token_id_range)
    index = 0
    while True:
        body: dict = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                      "max_tokens": config.output_len, "ignore_eos": True}
        if file_items is not None:
            item = file_items[index % len(file_items)]
            index += 1
            body.update({k: v for k, v in item.items() if k in ("prompt", "messages", "max_tokens")})
            if "max_tokens" in item:
                body["ignore_eos"] = item.get("ignore_eos", True)
        elif config.endpoint == "chat":
            words = " ".join(rng.choice(_WORDS) for _ in range(config.input_len))
            body["messages"] = [{"role": "user", "content": words}]
        else:
            body["prompt"] = rng.choices(ids, k=config.input_len)
        yield body


def _error_text(status: int, body: bytes) -> str:
    try:
        data = json.loads(body)
        message = data.get("message") or (data.get("error") or {}).get("message") or str(data)
    except (ValueError, AttributeError):
        message = body[:200].decode("utf-8", "replace")
    return f"HTTP {status}: {str(message)[:200]}"


async def send(client: httpx.AsyncClient, url: str, body: dict) -> RequestRecord:
    """POST one streaming request and time it. Never raises: failures come back as ok=False.

    Like `vllm bench serve`, every chunk carrying choices counts as a token event (chat: only chunks
    with content, so the role-only first chunk does not shorten TTFT)."""
    chat = "messages" in body
    start = time.perf_counter()
    first: float | None = None
    last = start
    gaps: list[float] = []
    usage: dict | None = None
    chunks = 0
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                raw = await response.aread()
                return RequestRecord(False, start, time.perf_counter(), error=_error_text(response.status_code, raw))
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    continue  # read on to the end of the body, or httpx drops the keep-alive connection
                now = time.perf_counter()
                if chat or '"usage":{' in data or '"usage": {' in data or '"error"' in data:
                    event = json.loads(data)
                    if event.get("error"):
                        err = event["error"]
                        msg = err.get("message", err) if isinstance(err, dict) else err
                        return RequestRecord(False, start, now, error=f"stream error: {msg}"[:200])
                    usage = event.get("usage") or usage
                    choices = event.get("choices")
                    if not choices:
                        continue
                    if chat and not (choices[0].get("delta") or {}).get("content"):
                        continue
                chunks += 1
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
    except (httpx.HTTPError, OSError, ValueError) as exc:
        return RequestRecord(False, start, time.perf_counter(), error=f"{type(exc).__name__}: {exc}"[:200])
    end = time.perf_counter()
    if first is None:
        return RequestRecord(False, start, end, error="no tokens streamed")
    prompt_tokens = int((usage or {}).get("prompt_tokens") or 0)
    output_tokens = int((usage or {}).get("completion_tokens") or chunks)
    return RequestRecord(True, start, end, ttft=first - start, itls=tuple(gaps), prompt_tokens=prompt_tokens,
                         output_tokens=output_tokens)


async def served_model(client: httpx.AsyncClient, base_url: str) -> str:
    """The first model id the server lists."""
    response = await client.get(f"{base_url}/v1/models", timeout=10.0)
    response.raise_for_status()
    data = response.json().get("data") or []
    if not data:
        raise ValueError(f"{base_url}/v1/models lists no model")
    return str(data[0]["id"])


async def server_version(client: httpx.AsyncClient, base_url: str) -> str | None:
    try:
        response = await client.get(f"{base_url}/version", timeout=5.0)
        return str(response.json().get("version")) if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
