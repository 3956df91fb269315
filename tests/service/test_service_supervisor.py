"""The session supervisor end to end on sim instances: one per session (a lock; racing starts leave one),
an owner-only socket, a dashboard-less `vtui up` whose crash is repaired by the policy, a kill -9 of the
supervisor that leaves the instances serving and a successor that re-adopts them with their context,
two clients seeing each other's actions, and `ps`/`down` when the layout file moved, broke or vanished."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from vtui.service import locations
from vtui.service.client import ServiceClient, ensure_supervisor

from .conftest import (
    alive,
    healthy,
    marked,
    ps_rows,
    sim_instance,
    supervisors,
    vtui,
    wait_for,
    write_layout,
)

pytestmark = pytest.mark.timeout(120)


def test_racing_supervisor_starts_leave_exactly_one(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a")])
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "vtui.service", "--layout", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(4)
    ]
    client = ServiceClient(session)
    wait_for(client.alive, what="a supervisor answering")
    codes = {p.pid: p.poll() for p in procs}
    wait_for(lambda: sum(p.poll() is not None for p in procs) == 3, what="three losers exiting")
    running = [p for p in procs if p.poll() is None]
    assert len(running) == 1, codes
    assert all(p.returncode == 0 for p in procs if p is not running[0])
    assert client.get("/status")["supervisor_pid"] == running[0].pid
    assert [s.pid for s in supervisors(session)] == [running[0].pid]

    # ...and the on-demand start, raced from threads, finds that one instead of starting another.
    results: list[tuple[int, bool]] = []

    def start() -> None:
        c, started = ensure_supervisor(session, path)
        results.append((c.get("/status")["supervisor_pid"], started))

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [(running[0].pid, False)] * 3
    running[0].kill()
    running[0].wait()


def test_socket_is_owner_only_in_an_owner_only_dir(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a")])
    ensure_supervisor(session, path)
    sock = locations.socket_path(session)
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700


def test_up_without_dashboard_then_a_kill_is_repaired_by_the_policy(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a", max_restarts=2)])
    up = vtui("up", str(path))
    assert up.returncode == 0, up.stdout + up.stderr
    row = ps_rows(str(path))["a"]
    assert row["state"] == "ready" and row["supervisor_pid"] in {s.pid for s in supervisors(session)}
    first = row["pid"]
    os.kill(first, signal.SIGKILL)  # no vtui command runs now: only the session supervisor can notice

    def restarted() -> dict | None:
        r = ps_rows(str(path))["a"]
        return r if r["state"] == "ready" and r["pid"] not in (None, first) else None

    row = wait_for(restarted, timeout=30, what="a restarted on a new pid")
    assert row["restarts"] == 1 and healthy(row["port"])
    assert not alive(first)
    assert vtui("down", str(path)).returncode == 0
    assert not marked(session + "/")


def test_kill_9_of_the_supervisor_leaves_instances_serving_and_a_successor_readopts(
    tmp_path: Path, session: str
) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a", gpus=(0,)), sim_instance("b", gpus=(1,))])
    assert vtui("up", str(path)).returncode == 0
    restart = vtui("restart", str(path), "b", "--set", "max-num-seqs=7")
    assert restart.returncode == 0, restart.stdout + restart.stderr
    before = ps_rows(str(path))
    facts_before = ServiceClient(session).get("/status")["instances"]
    assert all(i["facts"] and i["facts"]["kv_cache_tokens"] for i in facts_before), facts_before
    [old] = supervisors(session)
    procs_before = {p.pid for p in marked(session + "/")}

    old.kill()
    old.wait(5)
    assert all(healthy(r["port"]) for r in before.values())  # nobody supervises; they serve on

    after = ps_rows(str(path))  # starts a new supervisor, which re-adopts
    assert {n: (r["state"], r["pid"]) for n, r in after.items()} == {
        n: ("ready", r["pid"]) for n, r in before.items()
    }
    assert all(r["adopted"] for r in after.values())
    assert len({r["supervisor_pid"] for r in after.values()}) == 1
    assert after["a"]["supervisor_pid"] != old.pid
    assert after["b"]["flags"]["max-num-seqs"] == 7  # flags in effect survive
    assert {p.pid for p in marked(session + "/")} == procs_before  # nothing launched twice
    status = ServiceClient(session).get("/status")
    facts = {i["name"]: i["facts"] for i in status["instances"]}
    assert facts == {i["name"]: i["facts"] for i in facts_before}  # startup facts persisted
    assert [h["flags"].get("max-num-seqs") for h in status["flag_history"]["b"]][-1] == 7

    down = vtui("down", str(path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not marked(session + "/")


def test_two_clients_see_each_others_restart_within_a_second(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a")])
    assert vtui("up", str(path)).returncode == 0
    one, two = ServiceClient(session), ServiceClient(session)
    seen: list[tuple[float, dict]] = []
    opened = threading.Event()

    def watch() -> None:
        for message in two.feed(timeout=30):
            if message["type"] == "hello":
                opened.set()
            elif message["type"] == "event" and message["event"].get("kind") == "state":
                seen.append((time.monotonic(), message["event"]))
                if message["event"]["new"] == "ready":
                    return

    threading.Thread(target=watch, daemon=True).start()
    assert opened.wait(10)
    asked = time.monotonic()
    one.post("/restart", {"name": "a", "set": {"max-num-seqs": 5}}, timeout=None)
    wait_for(lambda: any(e["new"] == "ready" for _, e in seen), what="READY in the other feed")
    first_at, first = seen[0]
    assert first["new"] == "stopping" and first_at - asked < 1.0
    assert [e["new"] for _, e in seen] == ["stopping", "stopped", "starting", "ready"]
    assert vtui("down", str(path)).returncode == 0


@pytest.mark.parametrize("damage", ["moved", "invalid", "deleted"])
def test_ps_and_down_work_from_the_supervisor_when_the_layout_file_is_gone(
    tmp_path: Path, session: str, damage: str
) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a")])
    assert vtui("up", str(path)).returncode == 0
    pid = ps_rows()["a"]["pid"]  # no layout given: the last session
    if damage == "moved":
        path.rename(tmp_path / "elsewhere.toml")
    elif damage == "invalid":
        path.write_text(path.read_text().replace("max-model-len = 4096", "max-model-len = 'lots'"))
    else:
        path.unlink()
    rows = ps_rows()
    assert rows["a"]["state"] == "ready" and rows["a"]["pid"] == pid
    if damage == "invalid":
        assert ps_rows(str(path))["a"]["pid"] == pid  # named explicitly: still the supervisor's answer
    down = vtui("down", "--json")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not marked(session + "/") and not alive(pid)


def test_supervisor_leaves_when_idle_and_down_returns_with_every_process_gone(
    tmp_path: Path, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VTUI_SUPERVISOR_IDLE_S", "1")
    path = write_layout(tmp_path, session, [sim_instance("a", sim_engine_child=True, gpus=(0,))])
    assert vtui("up", str(path)).returncode == 0
    tree = [p.pid for p in marked(session + "/")]
    assert len(tree) >= 3  # log pump, API server, its engine child
    assert supervisors(session)
    down = vtui("down", str(path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not [pid for pid in tree if alive(pid)]  # at return, not a moment later
    wait_for(lambda: not supervisors(session), timeout=15, what="the idle supervisor to exit")
    assert not locations.socket_path(session).exists()


def test_an_instance_the_layout_no_longer_names_stays_known_until_down(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a", gpus=(0,)), sim_instance("b", gpus=(1,))])
    assert vtui("up", str(path)).returncode == 0
    b_pid = ps_rows(str(path))["b"]["pid"]
    write_layout(tmp_path, session, [sim_instance("a", gpus=(0,))])  # b removed from the file
    again = vtui("up", str(path))  # the supervisor runs the edited file; b runs on
    assert again.returncode == 0, again.stdout + again.stderr
    rows = ps_rows(str(path))
    assert rows["b"]["pid"] == b_pid and rows["b"]["in_layout"] is False and rows["a"]["in_layout"]

    [old] = supervisors(session)  # a successor knows b from its run record alone
    old.kill()
    old.wait(5)
    rows = ps_rows(str(path))
    assert rows["b"]["state"] == "ready" and rows["b"]["pid"] == b_pid and rows["b"]["adopted"]

    down = vtui("down", str(path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert "b: stopped" in down.stdout
    assert not marked(session + "/") and not alive(b_pid)


def test_a_state_dir_too_deep_for_a_unix_socket_still_runs_sessions(
    tmp_path: Path, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "state"
    run = Path(tempfile.mkdtemp(prefix="vr", dir="/tmp"))  # a short $XDG_RUNTIME_DIR, as /run/user/UID
    monkeypatch.setenv("VTUI_STATE_DIR", str(deep))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    assert len(os.fsencode(deep / f"{session}.sock")) > locations.SUN_PATH_MAX
    sock = locations.socket_path(session)
    assert len(os.fsencode(sock)) <= locations.SUN_PATH_MAX
    assert sock.parent == run / f"vtui-{os.getuid()}"
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    path = write_layout(tmp_path, session, [sim_instance("a")])
    try:
        up = vtui("up", str(path))
        assert up.returncode == 0, up.stdout + up.stderr
        assert ps_rows(str(path))["a"]["state"] == "ready"
        assert sock.is_socket()
    finally:
        vtui("down", str(path))
        from _support.procs import kill_state_dir

        kill_state_dir(str(deep))
        shutil.rmtree(run, ignore_errors=True)


def test_a_socket_folder_others_made_is_refused_by_name(
    tmp_path: Path, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "state"
    run = Path(tempfile.mkdtemp(prefix="vr", dir="/tmp"))
    monkeypatch.setenv("VTUI_STATE_DIR", str(deep))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    folder = run / f"vtui-{os.getuid()}"
    folder.mkdir()
    folder.chmod(0o777)  # anyone could have put a socket there
    path = write_layout(tmp_path, session, [sim_instance("a")])
    result = vtui("ps", str(path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert str(folder) in result.stderr and "not a folder of this user's alone" in result.stderr
    assert "Traceback" not in result.stderr
    shutil.rmtree(run, ignore_errors=True)


def test_a_runtime_dir_too_deep_too_falls_back_to_the_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VTUI_STATE_DIR", str(tmp_path / ("d" * 60) / ("e" * 60) / "state"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / ("r" * 90)))
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    sock = locations.socket_path("s")
    assert sock.parent == Path("/tmp") / f"vtui-{os.getuid()}"
    assert len(os.fsencode(sock)) <= locations.SUN_PATH_MAX


def test_a_forward_of_a_deep_state_dir_gets_a_socket_path_ssh_can_bind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: `vtui --host` forwarded each remote session to STATE_DIR/hosts/HASH.sock whatever its length;
    past 107 bytes ssh refused the forward and the dashboard waited for the host with no word."""
    from vtui.service.sshforward import Forward

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    monkeypatch.setenv("VTUI_STATE_DIR", str(deep))

    class Link:
        target, label = "me@gpu2", "gpu2"

        def changed(self) -> None:
            pass

    forward = Forward(Link(), {"session": "s", "socket": "/run/vtui/s.sock"})
    assert len(os.fsencode(deep / "hosts" / ("0" * 16 + ".sock"))) > locations.SUN_PATH_MAX
    assert len(os.fsencode(forward.local_socket)) <= locations.SUN_PATH_MAX
    other = Forward(Link(), {"session": "t", "socket": "/run/vtui/t.sock"})
    assert other.local_socket != forward.local_socket
