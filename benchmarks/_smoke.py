"""The benchmarks' smoke mode (benchmarks/README.md): with VTUI_BENCH_SMOKE=1 in the environment, a script
runs its default code path on its tiniest input, in a few seconds, on vtui's sim only (no real vLLM, no
GPU, nothing beyond 127.0.0.1). Its figures mean nothing then: the run only shows that the script still
works. tests/test_benchmarks_smoke.py runs every script this way.

A helper module, not a benchmark (its name starts with `_`). The scripts import it as `_smoke`: Python puts
a script's own folder first on sys.path."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ENV = "VTUI_BENCH_SMOKE"


def on() -> bool:
    """Whether this run is a smoke run."""
    return os.environ.get(ENV) == "1"


def tiny(parser: argparse.ArgumentParser, **defaults: object) -> None:
    """In a smoke run, these argument defaults instead of the parser's own (arguments given still win)."""
    if on():
        parser.set_defaults(**defaults)


def skip(reason: str) -> int:
    """What a smoke run prints when a path needs what it may not use (real vLLM, a GPU); returns 0."""
    print(f"smoke: skipped: {reason}", flush=True)
    return 0


@contextlib.contextmanager
def sim_session() -> Iterator[tuple[str, Path]]:
    """For the scripts that measure a running session (`vtui up LAYOUT` first): a session of one sim
    instance (Qwen3-0.6B, no startup delay) in a private state dir, set in os.environ for this process
    and its children, brought up here and down at the end. Yields its name and its layout file."""
    root = Path(__file__).resolve().parents[1]
    tmp = Path(tempfile.mkdtemp(prefix="vtui-bench-smoke-"))
    os.environ.update(
        VTUI_STATE_DIR=str(tmp / "state"),
        VTUI_CONFIG_DIR=str(tmp / "config"),
        VTUI_SUPERVISOR_GPU="0",
        VTUI_SUPERVISOR_IDLE_S="2",  # the supervisor leaves soon after the session is down
        PYTHONPATH=str(root),
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    session = f"smoke{os.getpid()}"
    layout = tmp / "smoke.toml"
    layout.write_text(
        f'[session]\nname = "{session}"\n\n[[instance]]\nname = "a"\nengine = "sim"\n'
        f'model = "Qwen/Qwen3-0.6B"\nport = {port}\n\n[instance.flags]\nmax-model-len = 4096\n'
        "sim-startup-scale = 0.0\n"
    )
    vtui = [sys.executable, "-m", "vtui"]
    up = subprocess.run([*vtui, "up", str(layout)], capture_output=True, text=True, timeout=120)
    try:
        if up.returncode != 0:
            raise RuntimeError(f"vtui up failed ({up.returncode}):\n{up.stdout[-2000:]}{up.stderr[-2000:]}")
        yield session, layout
    finally:
        subprocess.run([*vtui, "down", str(layout)], capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
