"""Facts that outlive the session supervisor (`core.runstate.Outcome`): a failed start, a restart count,
an unwatched death and flags applied but not saved are what the next `vtui ps` reports after the
supervisor left (idle) or was killed, until the user starts the instance again."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from vtui.layouts import load_layout

from .conftest import alive, marked, ps_rows, sim_instance, supervisors, vtui, wait_for, write_layout

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _leave_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VTUI_SUPERVISOR_IDLE_S", "1")


def _supervisor_gone(session: str) -> None:
    wait_for(lambda: not supervisors(session), timeout=20, what="the idle supervisor to exit")


def test_a_failed_start_and_its_cause_outlive_the_idle_supervisor(tmp_path: Path, session: str) -> None:
    bad = sim_instance("long", max_restarts=3, **{"max-model-len": 10_000_000})
    path = write_layout(tmp_path, session, [bad])
    up = vtui("up", str(path))
    assert up.returncode != 0, up.stdout + up.stderr
    _supervisor_gone(session)

    row = ps_rows(str(path))["long"]  # a new supervisor
    assert row["state"] == "failed" and row["pid"] is None, row
    assert "not restarted: the same flags would fail again (max_model_len_above_model)" in row["last_error"]
    assert row["diagnosis"] == "max_model_len_above_model"
    assert isinstance(row["failed_at"], float) and row["restarts"] == 0
    assert row["flags"]["max-model-len"] == 10_000_000
    table = vtui("ps", str(path))
    assert "failed" in table.stdout and "max_model_len_above_model" in table.stdout, table.stdout

    _supervisor_gone(session)  # `down` of a failed instance keeps why it failed
    assert vtui("down", str(path)).returncode == 0
    _supervisor_gone(session)
    row = ps_rows(str(path))["long"]
    assert row["state"] == "stopped" and "max_model_len_above_model" in row["last_error"], row

    fixed = {**bad, "flags": {**bad["flags"], "max-model-len": 4096}}  # the user fixes it: a start clears it
    write_layout(tmp_path, session, [fixed])
    up = vtui("up", str(path))
    assert up.returncode == 0, up.stdout + up.stderr
    assert vtui("down", str(path)).returncode == 0
    _supervisor_gone(session)
    row = ps_rows(str(path))["long"]
    assert row["state"] == "stopped" and row["last_error"] is None and row["failed_at"] is None, row


def test_a_restart_count_and_an_unwatched_death_outlive_a_killed_supervisor(
    tmp_path: Path, session: str
) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a", max_restarts=2)])
    assert vtui("up", str(path)).returncode == 0
    first = ps_rows(str(path))["a"]["pid"]
    os.kill(first, signal.SIGKILL)  # the policy restarts it: restarts 1
    row = wait_for(
        lambda: (r := ps_rows(str(path))["a"])["state"] == "ready" and r["pid"] != first and r,
        timeout=30,
        what="the policy restart",
    )
    assert row["restarts"] == 1
    pid = row["pid"]
    for proc in supervisors(session):  # the supervisor dies, then the instance: nobody watches
        proc.kill()
        proc.wait(5)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), timeout=10, what="the instance to die")

    row = ps_rows(str(path))["a"]
    assert row["state"] == "failed" and row["pid"] is None and row["restarts"] == 1, row
    assert f"pid {pid} exited while no vtui supervisor watched it" in row["last_error"]
    _supervisor_gone(session)
    row = ps_rows(str(path))["a"]  # and again: the record of the dead pid is gone, the outcome stays
    assert row["state"] == "failed" and row["pid"] is None and row["restarts"] == 1, row
    assert not marked(session + "/")


def test_flags_applied_but_not_saved_outlive_the_idle_supervisor(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a")])
    assert vtui("up", str(path)).returncode == 0
    restart = vtui("restart", str(path), "a", "--set", "max-num-seqs=3")
    assert restart.returncode == 0, restart.stdout + restart.stderr
    assert load_layout(path).instance("a").flags.get("max-num-seqs") is None  # not saved
    assert vtui("down", str(path)).returncode == 0
    _supervisor_gone(session)

    row = ps_rows(str(path))["a"]
    assert row["state"] == "stopped" and row["flags"]["max-num-seqs"] == 3, row
    assert row["last_error"] is None
    up = vtui("up", str(path))  # a start takes the layout's flags again, as the notice said
    assert up.returncode == 0, up.stdout + up.stderr
    assert "max-num-seqs" not in ps_rows(str(path))["a"]["flags"]
    assert vtui("down", str(path)).returncode == 0
