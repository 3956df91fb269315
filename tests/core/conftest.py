"""Fixtures for supervisor tests: fake-engine specs on free ports, and a sweep of anything left over."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest
from _support.procs import alive, kill_all, marked  # noqa: F401 (the tests import them from here)

from vtui.core.model import InstanceSpec, RestartPolicy

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fake_spec(
    name: str = "a",
    *,
    restart: RestartPolicy | None = None,
    gpus: tuple[int, ...] = (),
    port: int | None = None,
    **flags: object,
) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        model="fake-model",
        port=port or free_port(),
        gpus=gpus,
        command=(sys.executable, str(FAKE_ENGINE)),
        flags={k.replace("_", "-"): v for k, v in flags.items()},
        restart=restart or RestartPolicy("on-failure", max_restarts=2, backoff_initial=0.2),
    )


@pytest.fixture
def session_name():
    """A unique session name; every process started under it is killed after the test."""
    name = f"t{uuid.uuid4().hex[:8]}"
    yield name
    kill_all(marked(name + "/"))


async def until(predicate, timeout: float = 10.0) -> bool:
    """True once `predicate()` is, False after `timeout` seconds (the caller says what it waited for)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return False
