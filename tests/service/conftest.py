"""Fixtures for the session supervisor: sim (or fake-engine) layouts on free ports, a unique session per
test, `vtui` in a child process, and helpers to find, kill and wait for supervisors and instances.
Every supervisor and instance a test started is killed afterwards (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import tomli_w
from _support.procs import alive, marked  # noqa: F401 (the tests import them from here)

SMALL_MODEL = "Qwen/Qwen3-0.6B"
FAKE_ENGINE = Path(__file__).parents[1] / "core" / "fake_engine.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sim_instance(
    name: str, *, gpus: tuple[int, ...] = (), restart: str = "on-failure", max_restarts: int = 0, **flags: Any
) -> dict:
    """A sim instance starting at once; give instances of one layout their own `gpus` (the simulated
    GPUs hold real bookkeeping: two on one GPU at the default utilization do not fit)."""
    return {
        **({"gpus": list(gpus)} if gpus else {}),
        "name": name,
        "engine": "sim",
        "model": SMALL_MODEL,
        "port": free_port(),
        "restart": restart,
        "max_restarts": max_restarts,
        "backoff": 0.2,
        "flags": {
            "max-model-len": 4096,
            "sim-startup-scale": 0.0,
            **{k.replace("_", "-"): v for k, v in flags.items()},
        },
    }


def fake_instance(name: str, **extra: Any) -> dict:
    """An instance running tests/core/fake_engine.py: stdlib only, up in a few 10 ms."""
    return {
        "name": name,
        "model": "fake",
        "port": free_port(),
        "command": [sys.executable, str(FAKE_ENGINE)],
        "restart": "never",
        **extra,
    }


def write_layout(folder: Path, session: str, instances: list[dict], file: str = "layout.toml") -> Path:
    path = folder / file
    data = {"session": {"name": session, "allow_gpu_sharing": True}, "instance": instances}
    path.write_text(tomli_w.dumps(data))
    return path


@pytest.fixture
def session() -> Iterator[str]:
    yield f"sv{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _quick_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Supervisors of these tests skip NVML and leave soon after they go idle."""
    monkeypatch.setenv("VTUI_SUPERVISOR_GPU", "0")
    monkeypatch.setenv("VTUI_SUPERVISOR_IDLE_S", "30")


def vtui(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )


def ps_rows(*args: str) -> dict[str, dict]:
    result = vtui("ps", *args, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


def supervisors(session: str | None = None) -> list[psutil.Process]:
    """Live session supervisors of this test's state dir (of `session` when given)."""
    state = os.environ["VTUI_STATE_DIR"]
    found = []
    for proc in psutil.process_iter():
        try:
            if "vtui.service" not in proc.cmdline() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("VTUI_STATE_DIR") != state:
                continue
        except psutil.Error:
            continue
        if session is None or _session_of(proc) == session:
            found.append(proc)
    return found


def _session_of(proc: psutil.Process) -> str | None:
    try:
        cmd = proc.cmdline()
        layout = cmd[cmd.index("--layout") + 1]
        import tomllib

        return tomllib.loads(Path(layout).read_text())["session"]["name"]
    except (psutil.Error, ValueError, IndexError, OSError, KeyError):
        return None


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def outside_sim() -> Iterator[int]:
    """A `vtui sim` started by hand, as a user would: its port."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vtui", "sim", SMALL_MODEL, "--port", str(port), "--max-model-len", "4096"]
        + ["--sim-startup-scale", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: healthy(port), timeout=60, what="the outside sim answering /health")
        yield port
    finally:
        proc.kill()
        proc.wait(10)
