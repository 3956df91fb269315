"""`vtui down` with streams open: how long the stop takes and how each open stream ends ([DONE] or cut).

One instance (vtui's sim, or real vLLM with the test venv's tiny model) is brought up with `vtui up`, N
streaming completions are opened and read on threads, and once each has received its first token
`vtui down --grace G` is timed. Prints one JSON object.

    python benchmarks/bench_stop_streams.py --engine sim|vllm [--streams 2] [--grace 10] [--max-tokens 200]

Real vLLM needs VTUI_VLLM (the vllm executable) and VTUI_TINY_MODEL (a model folder), as the `vllm`
tests do.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import _smoke
import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def layout_text(engine: str, session: str, port: int, sim_speed: float) -> str:
    if engine == "sim":
        return f"""[session]
name = "{session}"

[[instance]]
name = "one"
engine = "sim"
model = "Qwen/Qwen3-0.6B"
port = {port}
restart = "never"
flags.max-model-len = 4096
flags.sim-startup-scale = 0.0
flags.sim-speed = {sim_speed}
"""
    vllm, model = os.environ["VTUI_VLLM"], os.environ["VTUI_TINY_MODEL"]
    return f"""[session]
name = "{session}"

[[instance]]
name = "one"
engine = "vllm"
model = "{model}"
command = ["{vllm}", "serve"]
port = {port}
restart = "never"
env.HF_HUB_OFFLINE = "1"
env.TRANSFORMERS_OFFLINE = "1"
env.VLLM_NO_USAGE_STATS = "1"
env.VLLM_CPU_OMP_THREADS_BIND = "0"
flags.kv-cache-memory-bytes = "64M"
flags.max-model-len = 2048
flags.max-num-seqs = 8
flags.dtype = "float32"
flags.enforce-eager = true
"""


def vtui(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


class Stream(threading.Thread):
    def __init__(self, url: str, model: str, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.url, self.model, self.max_tokens = url, model, max_tokens
        self.first = threading.Event()
        self.chunks = 0
        self.done_marker = False
        self.finish: str | None = None
        self.error: str | None = None
        self.ended_at: float | None = None
        self.chunks_at: dict[str, int] = {}

    def run(self) -> None:
        body = {
            "model": self.model,
            "prompt": "Tell me a long story",
            "max_tokens": self.max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(600.0, connect=10.0), trust_env=False) as client,
                client.stream("POST", self.url + "/v1/completions", json=body) as response,
            ):
                for line in response.iter_lines():
                    if line.startswith("data: [DONE]"):
                        self.done_marker = True
                    elif line.startswith("data: "):
                        chunk = json.loads(line[6:])
                        choice = (chunk.get("choices") or [{}])[0]
                        self.chunks += bool(choice.get("text"))
                        self.finish = choice.get("finish_reason") or self.finish
                        self.first.set()
        except (httpx.HTTPError, OSError) as exc:
            self.error = type(exc).__name__
        finally:
            self.ended_at = time.monotonic()
            self.first.set()


def timed_down(env: dict[str, str], layout: Path, grace: float) -> tuple[subprocess.CompletedProcess, dict]:
    """`vtui down`, each progress line stamped when it arrives: 'stopping'/'stopped' -> monotonic time
    (the stop itself, without the command's own start-up, which a loaded machine stretches)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "vtui", "down", str(layout), "--grace", str(grace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env | {"PYTHONUNBUFFERED": "1"},
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None and proc.stderr is not None
    stamps: dict[str, float] = {}
    lines = []
    for line in proc.stdout:
        lines.append(line)
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "one:" and parts[2] in ("stopping", "stopped"):
            stamps.setdefault(parts[2], time.monotonic())
            if parts[2] == "stopping":
                for stream in STREAMS:
                    stream.chunks_at["stop"] = stream.chunks
    err = proc.stderr.read()
    proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines), err), stamps


STREAMS: list[Stream] = []


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=("sim", "vllm"), default="sim")
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument(
        "--sim-speed", type=float, default=0.2, help="the sim's speed scale (slower: longer streams)"
    )
    _smoke.tiny(parser, streams=1, grace=2.0, max_tokens=16)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="vtui-stopbench-"))
    env = os.environ | {"VTUI_STATE_DIR": str(home / "state"), "VTUI_CONFIG_DIR": str(home / "config")}
    session = f"stopbench-{uuid.uuid4().hex[:6]}"
    port = free_port()
    layout = home / "layout.toml"
    layout.write_text(layout_text(args.engine, session, port, args.sim_speed))
    t0 = time.monotonic()
    up = vtui(env, "up", str(layout), "--timeout", "500")
    up_s = time.monotonic() - t0
    if up.returncode != 0:
        print(json.dumps({"error": "up failed", "stdout": up.stdout[-2000:], "stderr": up.stderr[-2000:]}))
        return 1
    url = f"http://127.0.0.1:{port}"
    model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
    streams = [Stream(url, model, args.max_tokens) for _ in range(args.streams)]
    STREAMS.extend(streams)
    for stream in streams:
        stream.start()
    for stream in streams:
        stream.first.wait(120)
    t_down = time.monotonic()
    down, stamps = timed_down(env, layout, args.grace)
    down_s = time.monotonic() - t_down
    t_stop = stamps.get("stopping", t_down)
    for stream in streams:
        stream.join(30)
    log = (home / "state" / "logs").glob("*.log")
    shutdown_lines = [
        line
        for f in log
        for line in f.read_text(errors="replace").splitlines()
        if "connections to close" in line or "shutdown" in line.lower()
    ]
    print(
        json.dumps(
            {
                "engine": args.engine,
                "grace_s": args.grace,
                "streams": args.streams,
                "max_tokens": args.max_tokens,
                "up_s": round(up_s, 1),
                "down_s": round(down_s, 2),
                "down_rc": down.returncode,
                "down_output": down.stdout.strip().splitlines()[-4:],
                "stop_s": round(stamps["stopped"] - t_stop, 2) if "stopped" in stamps else None,
                "tokens_at_stop": [s.chunks_at.get("stop") for s in streams],
                "streams_complete": sum(s.done_marker and s.finish == "length" for s in streams),
                "streams_cut": sum(not (s.done_marker and s.finish == "length") for s in streams),
                "tokens": [s.chunks for s in streams],
                "finish_reasons": [s.finish for s in streams],
                "done_markers": [s.done_marker for s in streams],
                "stream_end_after_stop_began_s": [
                    round(s.ended_at - t_stop, 2) if s.ended_at else None for s in streams
                ],
                "log_shutdown_lines": shutdown_lines[-6:],
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
