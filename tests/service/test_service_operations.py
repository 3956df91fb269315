"""The operation queue through the session supervisor, as users meet it: `vtui restart` from two shells
at once, and a supervisor killed in the middle of a restart. Afterwards the flags in `ps --json`, the
run record and the process's command line are the same."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import psutil

from vtui.core.runstate import RunStore
from vtui.service import locations
from vtui.service.client import ServiceClient, ensure_supervisor

from .conftest import fake_instance, ps_rows, supervisors, vtui, wait_for, write_layout


def cmdline_flags(pid: int) -> dict[str, str]:
    argv = psutil.Process(pid).cmdline()
    return {a[2:]: argv[i + 1] for i, a in enumerate(argv) if a.startswith("--max-num")}


def agree(path: Path, session: str) -> dict[str, str]:
    """The flags ps --json, the run record and the process agree on (asserted)."""
    row = ps_rows(str(path))["a"]
    record = RunStore().load(session, "a")
    assert record is not None and record.pid == row["pid"]
    reported = {k: str(v) for k, v in row["flags"].items() if k.startswith("max-num")}
    assert reported == {k: str(v) for k, v in record.flags.items() if k.startswith("max-num")}
    assert cmdline_flags(row["pid"]) == reported
    return reported


def test_restarts_from_two_shells_at_once_leave_one_truth(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [fake_instance("a", flags={"max-num-seqs": 4})])
    assert vtui("up", str(path)).returncode == 0
    for round_ in range(3):
        results: dict[str, object] = {}

        def restart(flag: str, value: int, key: str = "", results: dict[str, object] = results) -> None:
            results[key or flag] = vtui("restart", str(path), "a", "--set", f"{flag}={value}", timeout=90)

        shells = [
            threading.Thread(target=restart, args=("max-num-seqs", 10 + round_)),
            threading.Thread(target=restart, args=("max-num-batched-tokens", 200 + round_)),
            threading.Thread(target=restart, args=("max-num-seqs", 20 + round_, "seqs again")),
        ]
        for shell in shells:
            shell.start()
        for shell in shells:
            shell.join(120)
        codes = {k: getattr(r, "returncode", None) for k, r in results.items()}
        assert set(codes.values()) == {0}, {k: getattr(r, "stderr", r) for k, r in results.items()}
        flags = agree(path, session)
        assert flags["max-num-batched-tokens"] == str(200 + round_)  # every change ran, none was lost
        assert flags["max-num-seqs"] in (str(10 + round_), str(20 + round_))
    assert vtui("down", str(path)).returncode == 0
    # the session log says what was asked and what ran, timed (`eventhub.journal`, `Routes.handle`)
    log = locations.log_path(session).read_text()
    assert log.count("POST /restart: 200 after") == 9 and "POST /stop: 200 after" in log
    assert "a: operation restart" in log and "a: stopping -> stopped" in log


def test_a_supervisor_killed_mid_restart_is_finished_by_the_next(tmp_path: Path, session: str) -> None:
    # it sits out SIGTERM: the restart's stop takes the whole grace period, and the kill falls in it
    slow = fake_instance("a", flags={"max-num-seqs": 4}, env={"FAKE_IGNORE_SIGTERM": "1"})
    path = write_layout(tmp_path, session, [slow])
    client, _ = ensure_supervisor(session, path)
    client.post("/start", {"names": ["a"]}, timeout=60)
    client.post("/wait", {"names": ["a"], "timeout": 60}, timeout=70)
    supervisor = client.get("/status?brief=1")["supervisor_pid"]
    asker = threading.Thread(
        target=lambda: _quietly(
            lambda: ServiceClient(session).post(
                "/restart", {"name": "a", "set": {"max-num-seqs": 32}}, timeout=60
            )
        )
    )
    asker.start()
    wait_for(lambda: RunStore().load_operation(session, "a") is not None, what="the restart under way")
    wait_for(lambda: ps_rows(str(path))["a"]["state"] == "stopping", what="its stop under way")
    os.kill(supervisor, signal.SIGKILL)
    asker.join(30)
    wait_for(lambda: not supervisors(session), what="the supervisor gone")
    wait_for(lambda: ps_rows(str(path))["a"]["state"] == "ready", timeout=60, what="a ready again")
    assert agree(path, session)["max-num-seqs"] == "32"
    assert RunStore().load_operation(session, "a") is None
    assert vtui("down", str(path)).returncode == 0


def _quietly(call) -> None:
    try:
        call()
    except Exception:  # noqa: BLE001 — the supervisor is killed under this request: any error will do
        pass
