"""Live-sim fixtures: start `python -m vtui.sim` on a free port at startup scale 0 and always kill it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

# Outputs of real vLLM 0.32 (its /metrics payloads and startup log), kept with the telemetry fixtures.
REFERENCE = Path(__file__).resolve().parents[1] / "telemetry" / "fixtures"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sim:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, headers: dict | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def post(self, path: str, body: bytes, headers: dict | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request(
            self.url + path,
            data=body,
            method="POST",
            headers={"content-type": "application/json", **(headers or {})},
        )
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def launch(tmp_path: Path, model: str, *flags: str, env: dict | None = None, port: int | None = None) -> Sim:
    port = port or free_port()
    log = tmp_path / f"sim-{port}.log"
    fh = open(log, "wb")
    cmd = [
        sys.executable,
        "-m",
        "vtui.sim",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--sim-startup-scale",
        "0",
        *flags,
    ]
    proc = subprocess.Popen(
        cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})}
    )
    fh.close()
    return Sim(proc, port, log)


def wait_healthy(sim: Sim, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sim.proc.poll() is not None:
            raise AssertionError(f"sim exited {sim.proc.returncode}:\n{sim.text()[-3000:]}")
        try:
            if sim.get("/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("sim never became healthy:\n" + sim.text()[-3000:])


def kill(sim: Sim) -> None:
    if sim.proc.poll() is None:
        try:
            os.killpg(sim.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sim.proc.wait(timeout=10)


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator:
    started: list[Sim] = []

    def _start(model: str = "Qwen/Qwen3-8B", *flags: str, healthy: bool = True, **kw) -> Sim:
        sim = launch(tmp_path, model, *flags, **kw)
        started.append(sim)
        if healthy:
            wait_healthy(sim)
        return sim

    yield _start
    for sim in started:
        kill(sim)
