"""Pending flag edits held by the session supervisor: one client sets them, another sees them on its feed
within a second and in `/status`; secrets are masked on the wire and on disk; bad input is a 400 naming
it; a kill -9 of the supervisor loses nothing (its successor reads them back); and the dashboard: its
flag editor's edits, left unapplied, show as `[+] unsaved` in a dashboard opened afterwards."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from vtui.core.masking import MASK
from vtui.service import locations
from vtui.service.client import ServiceClient, ServiceError, ensure_supervisor
from vtui.ui.app import make_app
from vtui.ui.screens.flags import FlagEditorScreen
from vtui.ui.textdump import screen_text

from .conftest import fake_instance, sim_instance, supervisors, wait_for, write_layout

pytestmark = pytest.mark.timeout(120)

EDITS = {"max-num-seqs": 8, "enforce-eager": True, "api-key": "s3cret"}
KEPT = {"max-num-seqs": 8, "enforce-eager": True, "api-key": MASK}


def test_two_clients_share_the_edits_and_a_new_supervisor_keeps_them(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [fake_instance("a"), fake_instance("b")])
    ensure_supervisor(session, path)
    one, two = ServiceClient(session), ServiceClient(session)
    seen: list[tuple[float, dict]] = []
    hellos: list[dict] = []
    opened = threading.Event()

    def watch() -> None:
        for message in two.feed(timeout=30):
            if message["type"] == "hello":
                hellos.append(message)
                opened.set()
            elif message["type"] == "pending":
                seen.append((time.monotonic(), message))
                return

    threading.Thread(target=watch, daemon=True).start()
    assert opened.wait(10)
    assert hellos[0]["pending"] == {}
    asked = time.monotonic()
    answer = one.post("/pending", {"name": "a", "flags": EDITS})
    assert answer["flags"] == KEPT
    wait_for(lambda: seen, timeout=5, what="the edits on the other client's feed")
    at, message = seen[0]
    assert at - asked < 1.0 and message == {"type": "pending", "instance": "a", "flags": KEPT}
    assert two.get("/status")["pending"] == {"a": KEPT}

    with pytest.raises(ServiceError) as bad:
        one.post("/pending", {"name": "a", "flags": {"max-num-seqs": {"nested": 1}}})
    assert bad.value.status == 400 and "edits of a.max-num-seqs" in bad.value.problems[0]
    with pytest.raises(ServiceError) as unknown:
        one.post("/pending", {"name": "nope", "flags": EDITS})
    assert unknown.value.status == 404
    assert two.get("/status")["pending"] == {"a": KEPT}  # refused requests changed nothing

    state = locations.paths.state_dir() / f"{locations._safe(session)}.service.json"
    wait_for(lambda: state.exists() and "pending" in json.loads(state.read_text()), what="the state file")
    assert json.loads(state.read_text())["pending"] == {"a": KEPT} and "s3cret" not in state.read_text()

    [old] = supervisors(session)
    old.kill()
    old.wait(5)
    ensure_supervisor(session, path)  # a successor, which reads the state back
    [new] = supervisors(session)
    assert new.pid != old.pid
    hello = next(ServiceClient(session).feed(timeout=10))
    assert hello["type"] == "hello" and hello["pending"] == {"a": KEPT}

    ServiceClient(session).post("/pending", {"name": "a", "flags": None})  # applied or discarded
    assert ServiceClient(session).get("/status")["pending"] == {}
    wait_for(lambda: json.loads(state.read_text())["pending"] == {}, what="the cleared state on disk")
    ServiceClient(session).post("/shutdown", {})


async def until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_a_reattached_dashboard_shows_the_unsaved_edits(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a", max_num_seqs=16)])
    first = make_app(path, gpu_sampler=False, autostart=False)
    async with first.run_test(size=(120, 40)) as pilot:
        await until(lambda: first.supervisor.supervisor_pid is not None, what="the first dashboard attached")
        await pilot.press("f")
        await until(lambda: isinstance(first.screen, FlagEditorScreen), what="the flag editor")
        first.screen.query_one("#flag-max-num-seqs").value = "48"
        await pilot.pause()
        await pilot.press("escape")
        await until(lambda: "a" in ServiceClient(session).get("/status")["pending"], what="the edits kept")
    assert ServiceClient(session).get("/status")["pending"]["a"]["max-num-seqs"] == 48

    second = make_app(path, gpu_sampler=False, autostart=False)  # reopened: a new process would do the same
    async with second.run_test(size=(120, 40)) as pilot:
        await until(
            lambda: "[+] unsaved" in screen_text(second), what="[+] unsaved in the reopened dashboard"
        )
        assert "edits: a" in screen_text(second)
        await pilot.press("f")
        await until(lambda: isinstance(second.screen, FlagEditorScreen), what="the flag editor")
        assert second.screen.query_one("#flag-max-num-seqs").value == "48"
        assert "[+] unsaved edits" in screen_text(second)
        await pilot.press("ctrl+z")  # discarded: gone for every dashboard
        await until(lambda: not ServiceClient(session).get("/status")["pending"], what="the edits cleared")
        await pilot.press("escape")
        await until(lambda: "[+] unsaved" not in screen_text(second), what="the marker gone")
