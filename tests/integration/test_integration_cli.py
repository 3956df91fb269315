"""The headless CLI against real sim instances: `vtui up` returns with the instances running, `vtui ps`
sees them, a new supervisor adopts them without launching anything, `vtui down` leaves nothing; a crash is
seen by the session supervisor that outlived `vtui up`; a taken
port refuses the start naming its holder; a broken layout fails `vtui check` with exit 2."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from vtui.core.events import StateChanged
from vtui.core.runstate import RunStore
from vtui.core.state import State
from vtui.layouts import load_layout

from .conftest import Recorder, alive, marked, sim_instance, supervisor, write_layout

pytestmark = pytest.mark.timeout(60)


def vtui(*args: str, timeout: float = 45) -> subprocess.CompletedProcess[str]:
    """`vtui ARGS` in a child process (the test's isolated VTUI_STATE_DIR is in os.environ)."""
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )


def ps_rows(path: Path) -> dict[str, dict]:
    result = vtui("ps", str(path), "--json")
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


async def test_instances_survive_vtui_and_are_adopted_then_brought_down(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("one", gpus=(0,)), sim_instance("two", gpus=(1,))])
    up = vtui("up", str(path))
    assert up.returncode == 0, up.stdout + up.stderr
    assert "one: ready on" in up.stdout and "two: ready on" in up.stdout

    rows = ps_rows(path)
    assert {n: r["state"] for n, r in rows.items()} == {"one": "ready", "two": "ready"}
    pids = {n: r["pid"] for n, r in rows.items()}
    assert all(isinstance(p, int) and alive(p) for p in pids.values()), pids
    procs_before = {p.pid for p in marked(session + "/")}

    sup = supervisor(load_layout(path))
    rec = Recorder(sup)
    try:
        await sup.start()
        status = {s.name: s for s in sup.status()}
        assert {n: s.state for n, s in status.items()} == {"one": State.READY, "two": State.READY}
        assert all(s.adopted for s in status.values())
        assert {n: s.pid for n, s in status.items()} == pids
        assert not [e for e in rec.events if isinstance(e, StateChanged) and e.new is State.STARTING]
        assert {p.pid for p in marked(session + "/")} == procs_before  # nothing launched
    finally:
        await sup.close()  # leaves them running
    assert all(alive(p) for p in pids.values())

    down = vtui("down", str(path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not marked(session + "/")
    assert not any(alive(p) for p in pids.values())
    assert {n: r["state"] for n, r in ps_rows(path).items()} == {"one": "stopped", "two": "stopped"}
    assert not RunStore().all(session)


def test_up_refuses_a_taken_port_naming_its_holder(tmp_path: Path, session: str) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        path = write_layout(tmp_path, session, [sim_instance("taken", port=port), sim_instance("free")])
        up = vtui("up", str(path))
    assert up.returncode == 1, up.stdout + up.stderr
    assert f"port {port} is already in use by pid {os.getpid()}" in up.stderr, up.stderr
    assert psutil.Process().name() in up.stderr or "python" in up.stderr
    assert "nothing was started" in up.stderr
    assert not marked(session + "/")
    assert not RunStore().all(session)


def test_check_on_a_broken_layout_exits_2(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("bad", max_num_seqs="many")])
    check = vtui("check", str(path))
    assert check.returncode == 2, check.stdout + check.stderr
    assert "max-num-seqs" in check.stdout and "many" in check.stdout and f"{path.name}:" in check.stdout
    up = vtui("up", str(path))
    assert up.returncode == 2, up.stdout + up.stderr
    assert not marked(session + "/")


def test_cli_restart_with_flags_then_a_crash_seen_by_the_session_supervisor_then_down(
    tmp_path: Path, session: str
) -> None:
    path = write_layout(
        tmp_path,
        session,
        [sim_instance("core", gpus=(0,), sim_engine_child=True, gpu_memory_utilization=0.45)],
    )
    assert vtui("up", str(path)).returncode == 0
    restart = vtui("restart", str(path), "core", "--set", "max-num-seqs=3")
    assert restart.returncode == 0, restart.stdout + restart.stderr
    row = ps_rows(path)["core"]
    assert row["state"] == "ready" and row["flags"]["max-num-seqs"] == 3
    assert load_layout(path).instance("core").flags.get("max-num-seqs") is None  # the file is left as it is

    leader = row["pid"]
    orphans = [p for p in psutil.Process(leader).children(recursive=True) if "VLLM::" in p.name()]
    assert len(orphans) == 1
    os.kill(leader, signal.SIGKILL)
    # The session supervisor outlived `vtui up`: it sees the crash, applies the policy (no restarts
    # left: FAILED) and sweeps the orphaned engine before anything could relaunch on its GPU.
    deadline = time.monotonic() + 15
    while (row := ps_rows(path)["core"])["state"] != "failed" or alive(orphans[0].pid):
        assert time.monotonic() < deadline, row
        time.sleep(0.2)
    assert row["last_error"] == "killed by SIGKILL", row

    down = vtui("down", str(path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not marked(session + "/")


def test_a_start_its_log_calls_hopeless_fails_at_once_without_retries(tmp_path: Path, session: str) -> None:
    """Was: the on-failure policy retried a start whose log said the flags can never work (26 s, the
    same ValueError 4 times). Now FAILED after the first try, the budget untouched, the reason said."""
    bad = sim_instance("long", max_restarts=3, backoff=0.5, **{"max-model-len": 10_000_000})
    path = write_layout(tmp_path, session, [bad])
    up = vtui("up", str(path))
    try:
        assert up.returncode != 0, up.stdout + up.stderr
        row = ps_rows(path)["long"]
        assert row["state"] == "failed" and row["restarts"] == 0, row
        assert "not restarted: the same flags would fail again (max_model_len_above_model)" in (
            row.get("last_error") or ""
        ), row
    finally:
        vtui("down", str(path))
