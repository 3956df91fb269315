"""A tiny OpenAI-compatible streaming server for bench tests: TTFT grows with the requests in flight,
requests above `fail_above` in flight get HTTP 503, and /metrics reports running / waiting / KV usage /
preemptions / a TTFT histogram the way vLLM names them."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import pytest

BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, float("inf"))


@dataclass
class FakeServer:
    ttft_per_inflight: float = 0.002
    token_delay: float = 0.001
    fail_above: int | None = None
    slots: int = 4
    port: int = 0
    in_flight: int = 0
    served: int = 0
    preemptions: int = 0
    peak_in_flight: int = 0
    connections: int = 0
    ttft_obs: list[float] = field(default_factory=list)
    # process_start_time_seconds answered by successive /metrics scrapes, in turn (several: replicas
    # behind a load balancer); empty: not reported
    start_times: tuple[float, ...] = ()
    scrapes: int = 0
    _server: asyncio.AbstractServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metrics(self) -> str:
        lab = 'engine="0",model_name="fake"'
        lines = [
            f"vllm:num_requests_running{{{lab}}} {min(self.in_flight, self.slots)}",
            f"vllm:num_requests_waiting{{{lab}}} {max(0, self.in_flight - self.slots)}",
            f"vllm:kv_cache_usage_perc{{{lab}}} {min(1.0, self.in_flight / 8)}",
            f"vllm:num_preemptions_total{{{lab}}} {self.preemptions}",
            f"vllm:generation_tokens_total{{{lab}}} {self.served * 8}",
        ]
        for b in BOUNDS:
            le = "+Inf" if b == float("inf") else repr(b)
            lines.append(
                f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} '
                f"{sum(1 for t in self.ttft_obs if t <= b)}"
            )
        lines.append(f"vllm:time_to_first_token_seconds_count{{{lab}}} {len(self.ttft_obs)}")
        lines.append(f"vllm:time_to_first_token_seconds_sum{{{lab}}} {sum(self.ttft_obs)}")
        if self.start_times:
            lines.append(
                f"process_start_time_seconds {self.start_times[self.scrapes % len(self.start_times)]}"
            )
        self.scrapes += 1
        return "\n".join(lines) + "\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode().split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                if method == "GET":
                    if path == "/metrics":
                        self._send(writer, 200, self.metrics().encode(), "text/plain")
                    elif path == "/version":
                        self._send(writer, 200, b'{"version": "fake-1"}')
                    elif path == "/v1/models":
                        self._send(writer, 200, b'{"object": "list", "data": [{"id": "fake"}]}')
                    else:
                        self._send(writer, 404, b'{"error": "not found"}')
                else:
                    await self._generate(json.loads(body), writer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @staticmethod
    def _send(
        writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json"
    ) -> None:
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body
        )

    async def _generate(self, payload: dict, writer: asyncio.StreamWriter) -> None:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if self.fail_above is not None and self.in_flight > self.fail_above:
                self.preemptions += 1
                self._send(writer, 503, b'{"message": "server busy", "type": "ServiceUnavailable"}')
                return
            prompt = payload.get("prompt") or []
            n = int(payload.get("max_tokens", 16))
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            ttft = self.ttft_per_inflight * self.in_flight
            await asyncio.sleep(ttft)
            self.ttft_obs.append(ttft)
            for i in range(n):
                if i:
                    await asyncio.sleep(self.token_delay)
                self._chunk(
                    writer,
                    {"id": "x", "choices": [{"index": 0, "text": "a", "finish_reason": None}], "usage": None},
                )
                await writer.drain()
            usage = {"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": len(prompt) + n}
            self._chunk(writer, {"id": "x", "choices": [], "usage": usage})
            writer.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
            self.served += 1
        finally:
            self.in_flight -= 1

    @staticmethod
    def _chunk(writer: asyncio.StreamWriter, event: dict) -> None:
        data = ("data: " + json.dumps(event, separators=(",", ":")) + "\n\n").encode()
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    async def start(self) -> FakeServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()


@pytest.fixture
async def fake_server():
    servers: list[FakeServer] = []

    async def make(**kw) -> FakeServer:
        server = await FakeServer(**kw).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.close()
