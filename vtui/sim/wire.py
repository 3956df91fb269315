"""What the parts of the sim's HTTP server share (vtui.sim.server composes them): its settings
(`ServerConfig`), the answer a route hands back (`Reply`), and HTTP/1.1 as uvicorn writes it -- an
answer's head, the head of a streamed answer, chunked framing."""

from __future__ import annotations

from dataclasses import dataclass

from vtui.sim.tokens import ESTIMATE, Counter


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


# A route's answer: its status and JSON body (the server writes it, or only its head to a HEAD)
Reply = tuple[int, bytes]

# Which count the sim used, on every answer (vLLM's bodies have no room for it): "tokenizer" or "estimate"
COUNT_HEADER = "x-vtui-sim-token-count"
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
}
LAST_CHUNK = b"0\r\n\r\n"  # ends a chunked answer


def head(status: int, count: str, length: int, ctype: str | None, allow: str | None) -> bytes:
    """An answer's status line and headers, as uvicorn writes them; `count` is the counter's kind."""
    extra = f"allow: {allow}\r\n" if allow else ""
    extra += f"{COUNT_HEADER}: {count}\r\n"
    extra += f"content-type: {ctype}\r\n" if ctype else ""
    return (
        f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nserver: uvicorn\r\n"
        f"{extra}content-length: {length}\r\n\r\n".encode()
    )


def stream_head(count: str) -> bytes:
    """The head of a streamed (server-sent events) answer: chunked, no length."""
    return (
        "HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        f"{COUNT_HEADER}: {count}\r\ntransfer-encoding: chunked\r\n\r\n".encode()
    )


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked answer."""
    return b"%x\r\n%b\r\n" % (len(data), data)
