"""Integration fixtures: layout files of sim instances on free ports, a unique session per test whose
every process (marked with VTUI_INSTANCE "<session>/…") is killed afterwards, and small async helpers."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from _support.procs import alive, kill_all, marked  # noqa: F401 (the tests import them from here)

from vtui.core.events import Event, StateChanged
from vtui.core.model import Layout
from vtui.core.state import TRANSITIONS, State
from vtui.supervisor.launcher import OsLauncher
from vtui.supervisor.supervisor import Supervisor

SMALL_MODEL = "Qwen/Qwen3-0.6B"  # 40,960 positions in the sim's table


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sim_instance(
    name: str,
    *,
    gpus: tuple[int, ...] = (),
    model: str = SMALL_MODEL,
    port: int | None = None,
    restart: str = "on-failure",
    max_restarts: int = 0,
    backoff: float = 0.2,
    **flags: Any,
) -> dict[str, Any]:
    """One `[[instance]]` table of engine sim, starting instantly (sim-startup-scale 0)."""
    table: dict[str, Any] = {
        "name": name,
        "engine": "sim",
        "model": model,
        "port": port or free_port(),
        "restart": restart,
        "max_restarts": max_restarts,
        "backoff": backoff,
    }
    if gpus:
        table["gpus"] = list(gpus)
    table["flags"] = {
        "max-model-len": 4096,
        "sim-startup-scale": 0.0,
        **{k.replace("_", "-"): v for k, v in flags.items()},
    }
    return table


def write_layout(
    folder: Path,
    session: str,
    instances: list[dict[str, Any]],
    *,
    sharing: bool = False,
    file: str = "layout.toml",
) -> Path:
    path = folder / file
    data = {"session": {"name": session, "allow_gpu_sharing": sharing}, "instance": instances}
    path.write_text(tomli_w.dumps(data))
    return path


@pytest.fixture
def session() -> Iterator[str]:
    """A unique session name; every process started under it is killed after the test."""
    name = f"it{uuid.uuid4().hex[:8]}"
    yield name
    kill_all(marked(name + "/"))


def supervisor(layout: Layout, **kw: Any) -> Supervisor:
    kw.setdefault("launcher", OsLauncher(grace=3))
    kw.setdefault("health_interval", 0.1)
    kw.setdefault("poll_interval", 0.05)
    return Supervisor(layout, **kw)


class Recorder:
    """Every event a supervisor emits, in order."""

    def __init__(self, sup: Supervisor) -> None:
        self.events: list[Event] = []
        self.unsubscribe = sup.subscribe(self.events.append)

    def states(self, name: str) -> list[StateChanged]:
        return [e for e in self.events if isinstance(e, StateChanged) and e.instance == name]

    def index(self, predicate: Callable[[Event], bool], what: str = "event") -> int:
        for i, event in enumerate(self.events):
            if predicate(event):
                return i
        raise AssertionError(f"no {what} among {len(self.events)} events")


def assert_valid_path(changes: list[StateChanged]) -> None:
    """The StateChanged history of one instance is a walk through TRANSITIONS starting at STOPPED."""
    current = State.STOPPED
    for event in changes:
        assert event.old is current, f"{event} does not continue from {current}"
        assert event.new in TRANSITIONS[event.old], f"{event.old} -> {event.new} is not an edge"
        current = event.new


async def until(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
