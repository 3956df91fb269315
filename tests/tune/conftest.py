"""Sim layouts for the tune tests: instances starting at once (`sim-startup-scale = 0`) on free ports,
a supervisor that skips NVML, and `vtui` run in a child process with this worktree first on the path."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_layout(folder: Path, instances: list[tuple[str, dict[str, object]]]) -> Path:
    """A layout (with a comment in each flags table, to see it kept) of sim instances on GPU 0."""
    text = f'[session]\nname = "tu{uuid.uuid4().hex[:8]}"\nallow_gpu_sharing = true\n'
    for name, flags in instances:
        text += (
            f'\n[[instance]]\nname = "{name}"\nengine = "sim"\nmodel = "Qwen/Qwen3-0.6B"\n'
            f'port = {free_port()}\nrestart = "never"\ngpus = [0]\n\n[instance.flags]\n'
            "# kept by a save\n"
        )
        for key, value in {"max-model-len": 2048, "sim-startup-scale": 0.0, **flags}.items():
            text += f"{key} = {str(value).lower() if isinstance(value, bool) else value}\n"
    path = folder / "layout.toml"
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def _quick_supervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VTUI_SUPERVISOR_GPU", "0")
    monkeypatch.setenv("VTUI_SUPERVISOR_IDLE_S", "30")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))


def vtui(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )


# a tune on the sim that takes seconds, not minutes
QUICK = [
    "--concurrency",
    "8",
    "--num-requests",
    "24",
    "--input-len",
    "128",
    "--output-len",
    "8",
    "--warmup",
    "1",
    "--ttft-p95-ms",
    "150",
]


def instance_row(layout: Path, name: str = "a") -> dict[str, Any]:
    """`name`'s row of `vtui ps --json`."""
    result = vtui("ps", str(layout), "--json")
    assert result.returncode == 0, result.stderr
    return next(r for r in json.loads(result.stdout) if r["name"] == name)
