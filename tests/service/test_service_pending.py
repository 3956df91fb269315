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
    assert at - asked < 1.0 and message == {
        "type": "pending",
        "instance": "a",
        "flags": KEPT,
        "conflicts": [],
    }
    assert two.get("/status")["pending"] == {"a": KEPT}

    with pytest.raises(ServiceError) as bad:
        one.post("/pending", {"name": "a", "flags": {"max-num-seqs": {"nested": 1}}})
    assert bad.value.status == 400 and "flags.max-num-seqs" in bad.value.problems[0]
    with pytest.raises(ServiceError) as unknown:
        one.post("/pending", {"name": "nope", "flags": EDITS})
    assert unknown.value.status == 404
    assert two.get("/status")["pending"] == {"a": KEPT}  # refused requests changed nothing

    state = locations.paths.state_dir() / f"{locations._safe(session)}.service.json"
    wait_for(lambda: state.exists() and "pending" in json.loads(state.read_text()), what="the state file")
    assert (
        json.loads(state.read_text())["pending"]["a"]["flags"] == KEPT and "s3cret" not in state.read_text()
    )

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


def test_a_restart_by_another_client_rebases_the_kept_edit_and_marks_the_conflict(
    tmp_path: Path, session: str
) -> None:
    """The kept edit is a whole flag set: applied after another client's restart with other flags, it
    would revert them. It keeps only its own changes on the new flags; a flag both changed keeps the
    edit's value and is a conflict, on the feed, in /status, and kept by a successor."""
    flags = {"max-num-seqs": 8, "max-model-len": 4096, "seed": 1}
    path = write_layout(tmp_path, session, [fake_instance("a", flags=flags)])
    ensure_supervisor(session, path)
    one, two = ServiceClient(session), ServiceClient(session)
    one.post("/start", {"names": ["a"]})
    one.post("/wait", {"names": ["a"], "timeout": 30})
    edit = {"max-num-seqs": 16, "max-model-len": 4096}  # the user: 8 -> 16, seed unset
    one.post("/pending", {"name": "a", "flags": edit, "base": flags})
    pending: list[dict] = []
    opened = threading.Event()

    def watch() -> None:
        for message in ServiceClient(session).feed(timeout=60):
            if message["type"] == "hello":
                opened.set()
            elif message["type"] == "pending":
                pending.append(message)
                return

    threading.Thread(target=watch, daemon=True).start()
    assert opened.wait(10)
    # the other client: a restart with max-num-seqs 32 and max-model-len 2048
    two.post("/restart", {"name": "a", "set": {"max-num-seqs": 32, "max-model-len": 2048}})
    rebased = {"max-num-seqs": 16, "max-model-len": 2048}  # the other's 2048 kept, seed still unset
    conflict = {"flag": "max-num-seqs", "mine": 16, "theirs": 32, "was": 8}
    status = two.get("/status")
    assert status["pending"] == {"a": rebased}
    assert status["pending_conflicts"] == {"a": [conflict]}
    wait_for(lambda: pending, timeout=5, what="the rebased edit on the feed")
    assert pending[0] == {"type": "pending", "instance": "a", "flags": rebased, "conflicts": [conflict]}

    state = locations.paths.state_dir() / f"{locations._safe(session)}.service.json"
    wait_for(
        lambda: json.loads(state.read_text())["pending"].get("a", {}).get("flags") == rebased,
        what="the rebased edit on disk",
    )
    kept = json.loads(state.read_text())["pending"]["a"]
    assert kept["base"] == {"max-num-seqs": 32, "max-model-len": 2048, "seed": 1} and kept["conflicts"] == [
        conflict
    ]
    [old] = supervisors(session)
    old.kill()
    old.wait(5)
    ensure_supervisor(session, path)  # a successor: the rebased edit and its conflict back
    hello = next(ServiceClient(session).feed(timeout=10))
    assert hello["pending"] == {"a": rebased} and hello["pending_conflicts"] == {"a": [conflict]}

    # an edit sent from flags older than those applied (a client that had not heard of the restart)
    answer = one.post("/pending", {"name": "a", "flags": {**flags, "seed": 7}, "base": flags})
    assert answer["flags"] == {"max-num-seqs": 32, "max-model-len": 2048, "seed": 7}
    applied = ServiceClient(session).post("/restart", {"name": "a", "set": {"seed": 7}})
    assert applied["flags"]["seed"] == 7
    assert ServiceClient(session).get("/status")["pending"] == {}  # applied: nothing of it left
    ServiceClient(session).post("/stop", {"names": ["a"]})
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
