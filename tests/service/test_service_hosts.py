"""Several hosts, one dashboard (`vtui --host`): two session supervisors on this machine, the second one
in a state dir of its own ("host" gpu2) and reached only through the ssh client path: `vtui sessions
--json` run over ssh, then the remote socket forwarded to a local one (`ssh -N -L LOCAL:REMOTE`). The
ssh client is `vtui.testing.fake_ssh` (there is no sshd here), which relays the forwarded socket as
OpenSSH does and can make a host unreachable (`<host>/down`)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from _support.procs import kill_state_dir

from vtui.core.state import State
from vtui.service.multihost import Fleet
from vtui.ui.app import make_app
from vtui.ui.widgets.gpu_panel import GpuPanel
from vtui.ui.widgets.instance_table import HOST_LOST, FleetTable

from .conftest import sim_instance, write_layout

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


async def until(predicate, timeout: float = 40.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.fixture
def hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The fake ssh's hosts folder; the ssh command and the remote vtui pointed at this checkout."""
    root = tmp_path / "hosts"
    root.mkdir()
    monkeypatch.setenv("VTUI_SSH", f"{sys.executable} -m vtui.testing.fake_ssh")
    monkeypatch.setenv("VTUI_FAKE_SSH_ROOT", str(root))
    monkeypatch.setenv("VTUI_REMOTE_VTUI", f"{sys.executable} -m vtui")
    yield root
    for host in root.iterdir():
        kill_state_dir(str(host / "state"))


def on_host(host: str, *command: str, gpu: bool = True) -> subprocess.CompletedProcess[str]:
    """COMMAND run "on" host (through the fake ssh: that host's state dir)."""
    env = {**os.environ, "VTUI_SUPERVISOR_GPU": "1" if gpu else "0"}
    return subprocess.run(
        [sys.executable, "-m", "vtui.testing.fake_ssh", f"me@{host}", *command],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def forwards(root: Path, host: str) -> list[int]:
    folder = root / host / "forwards"
    return [int(p.name) for p in folder.iterdir()] if folder.exists() else []


def test_vtui_sessions_lists_the_live_supervisors_and_their_sockets(
    tmp_path: Path, session: str, hosts: Path
) -> None:
    path = write_layout(tmp_path, session, [sim_instance("r")])
    assert on_host("gpu2", sys.executable, "-m", "vtui", "up", str(path)).returncode == 0
    listed = on_host("gpu2", sys.executable, "-m", "vtui", "sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)
    assert entry["session"] == session
    assert entry["socket"] == str(hosts / "gpu2" / "state" / f"{session}.sock")
    assert psutil.pid_exists(entry["pid"])
    nothing = subprocess.run(
        [sys.executable, "-m", "vtui", "sessions", "--json"], capture_output=True, text=True, timeout=60
    )
    assert json.loads(nothing.stdout) == []  # this machine's state dir has none


async def test_a_dashboard_shows_and_drives_a_second_hosts_session_and_rides_out_a_lost_link(
    tmp_path: Path, session: str, hosts: Path
) -> None:
    remote_path = write_layout(tmp_path, "far" + session, [sim_instance("r1", gpus=(0,))], "remote.toml")
    up = await asyncio.to_thread(on_host, "gpu2", sys.executable, "-m", "vtui", "up", str(remote_path))
    assert up.returncode == 0, up.stdout + up.stderr
    local_path = write_layout(tmp_path, session, [sim_instance("a", gpus=(0,))])
    await asyncio.sleep(1.5)  # gpu2's supervisor scrapes r1 before the dashboard opens: its history
    opened = time.time()

    app = make_app(local_path, gpu_sampler=False, hosts=["me@gpu2"])
    async with app.run_test(size=(160, 40)) as pilot:
        assert isinstance(app.supervisor, Fleet)
        views = app.store.views
        await until(lambda: views["a"].state == State.READY, what="the local instance READY")
        await until(
            lambda: "gpu2:r1" in views and views["gpu2:r1"].state == State.READY, what="gpu2's instance"
        )
        await until(lambda: app.store.hosts["gpu2"].connected, what="gpu2 connected")
        # both sets in one table, each row with its host
        table = app.screen.query_one(FleetTable)
        await until(lambda: set(table.names) == {"a", "gpu2:r1"}, what="both rows")
        assert table._rows["gpu2:r1"].host == "gpu2" and table._rows["a"].host == "local"
        assert table._rows["gpu2:r1"].label == "r1"
        # the remote supervisor's samples come through the forward (it scrapes on its host)
        await until(lambda: views["gpu2:r1"].sample is not None, what="a sample of gpu2's instance")
        history = views["gpu2:r1"].history  # backfilled from gpu2's supervisor, through the Fleet
        await until(lambda: bool(history) and history[0].at < opened, what="gpu2's history backfilled")
        # the GPU panel has a section per host, the remote one from its supervisor's sampler
        await until(lambda: "gpu2" in app.store.host_gpus, what="gpu2's GPU sample")
        panel = app.screen.query_one(GpuPanel)
        await until(lambda: "── gpu2" in panel.render().plain, what="gpu2's GPU section")

        # act on the remote instance with the same key: restart (confirmed)
        old_pid = views["gpu2:r1"].status.pid
        table.select("gpu2:r1")
        await pilot.press("r")
        await pilot.pause()
        await pilot.press("y")
        await until(
            lambda: views["gpu2:r1"].state == State.READY and views["gpu2:r1"].status.pid != old_pid,
            what="gpu2's instance restarted",
        )
        listed = await asyncio.to_thread(
            on_host, "gpu2", sys.executable, "-m", "vtui", "ps", str(remote_path), "--json"
        )
        [row] = json.loads(listed.stdout)
        assert row["pid"] == views["gpu2:r1"].status.pid  # the restart happened on gpu2's supervisor
        assert views["a"].state == State.READY  # the local one untouched

        # the link is lost: the host shows disconnected, the UI keeps answering, the local row is live
        (hosts / "gpu2" / "down").touch()
        await until(lambda: not app.store.hosts["gpu2"].connected, what="gpu2 disconnected")
        assert app.store.hosts["gpu2"].state == "disconnected"
        await until(lambda: table._rows["gpu2:r1"].phase == HOST_LOST, what="the row marked")
        assert "DISCONNECTED" in panel.render().plain
        t0 = asyncio.get_running_loop().time()
        await pilot.press("down")  # keys still work at once while ssh retries
        await pilot.pause()
        assert asyncio.get_running_loop().time() - t0 < 2.0
        await asyncio.sleep(1.5)  # a retry or two refused while the host is down
        assert not app.store.hosts["gpu2"].connected

        # ...and back: reconnected with backoff, the rows live again
        (hosts / "gpu2" / "down").unlink()
        await until(lambda: app.store.hosts["gpu2"].connected, timeout=60, what="gpu2 reconnected")
        await until(lambda: table._rows["gpu2:r1"].phase != HOST_LOST, what="the row live again")
        assert views["gpu2:r1"].state == State.READY
        await app.supervisor.stop(["a"])
    # leaving the dashboard ends the forwards, and leaves gpu2's instance running
    await until(lambda: not forwards(hosts, "gpu2"), timeout=10, what="the forwards ended")
    listed = await asyncio.to_thread(
        on_host, "gpu2", sys.executable, "-m", "vtui", "ps", str(remote_path), "--json"
    )
    assert json.loads(listed.stdout)[0]["state"] == "ready"


async def test_a_session_started_on_the_host_after_the_dashboard_attached_gets_its_rows(
    tmp_path: Path, session: str, hosts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpu2 runs one session when the dashboard attaches; a second one started there later is found by
    the link's next look (with backoff; the cap lowered for the test) and gets its forward and rows,
    named with their session (the first session's rows keep their names), driven with the same calls;
    keys answer meanwhile."""
    from vtui.service import hosts as hosts_module

    monkeypatch.setattr(hosts_module, "REDISCOVER_MAX", 3.0)
    first = write_layout(tmp_path, "far" + session, [sim_instance("r1", gpus=(0,))], "first.toml")
    up = await asyncio.to_thread(on_host, "gpu2", sys.executable, "-m", "vtui", "up", str(first), gpu=False)
    assert up.returncode == 0, up.stdout + up.stderr
    local_path = write_layout(tmp_path, session, [sim_instance("a", gpus=(0,))])

    app = make_app(local_path, gpu_sampler=False, hosts=["me@gpu2"])
    async with app.run_test(size=(160, 40)) as pilot:
        views = app.store.views
        table = app.screen.query_one(FleetTable)
        await until(lambda: "gpu2:r1" in views and views["gpu2:r1"].state == State.READY, what="gpu2:r1")
        later_session = "late" + session
        later = write_layout(tmp_path, later_session, [sim_instance("r2", gpus=(1,))], "later.toml")
        up = await asyncio.to_thread(
            on_host, "gpu2", sys.executable, "-m", "vtui", "up", str(later), gpu=False
        )
        assert up.returncode == 0, up.stdout + up.stderr
        name = f"gpu2:{later_session}/r2"
        t0 = asyncio.get_running_loop().time()
        await pilot.press("down")  # keys answer while the link looks for sessions (an ssh that
        await pilot.pause()  # blocked would take up to its 20 s timeout; this machine is loaded)
        assert asyncio.get_running_loop().time() - t0 < 5.0
        await until(
            lambda: name in views and views[name].state == State.READY, what="the later session's row"
        )
        await until(lambda: name in table.names, what="its row in the table")
        assert set(table.names) == {"a", "gpu2:r1", name}  # the first session's row kept its name
        assert table._rows[name].host == "gpu2" and views["gpu2:r1"].state == State.READY
        assert app.store.hosts["gpu2"].sessions == ("far" + session, later_session)
        await until(lambda: views[name].sample is not None, what="a sample of the later session's instance")
        await app.supervisor.stop([name])  # routed to the later session's supervisor
        listed = await asyncio.to_thread(
            on_host, "gpu2", sys.executable, "-m", "vtui", "ps", str(later), "--json"
        )
        assert json.loads(listed.stdout)[0]["state"] == "stopped"
        listed = await asyncio.to_thread(
            on_host, "gpu2", sys.executable, "-m", "vtui", "ps", str(first), "--json"
        )
        assert json.loads(listed.stdout)[0]["state"] == "ready"
        await app.supervisor.stop(["a"])
        await app.bridge.close()  # as quitting does: every ssh ended and its pipes read to the end
    await until(lambda: not forwards(hosts, "gpu2"), timeout=10, what="the forwards ended")


async def test_a_remote_rows_log_scrolls_back_through_its_hosts_supervisor(
    tmp_path: Path, session: str, hosts: Path
) -> None:
    """The log view of another host's instance: its file is over there, so scrolling to the top of a
    paused view asks that host's supervisor (`POST /logs` with the view's first lines, through the
    forward) for the lines before them, which are prepended in order."""
    from vtui.ui.screens.logs import SCROLLBACK_CHUNK, LogScreen, LogView
    from vtui.ui.store import LOG_LINES

    remote_path = write_layout(tmp_path, "far" + session, [sim_instance("r1", gpus=(0,))], "remote.toml")
    up = await asyncio.to_thread(
        on_host, "gpu2", sys.executable, "-m", "vtui", "up", str(remote_path), gpu=False
    )
    assert up.returncode == 0, up.stdout + up.stderr
    log_file = hosts / "gpu2" / "state" / "logs" / f"far{session}.r1.log"
    assert log_file.exists()
    local_path = write_layout(tmp_path, session, [sim_instance("a", gpus=(0,))])
    app = make_app(local_path, gpu_sampler=False, hosts=["me@gpu2"])
    async with app.run_test(size=(120, 30)) as pilot:
        views = app.store.views
        await until(lambda: "gpu2:r1" in views and views["gpu2:r1"].state == State.READY, what="gpu2:r1")
        count = LOG_LINES + 2 * SCROLLBACK_CHUNK
        with open(log_file, "a", encoding="utf-8") as fh:  # O_APPEND, as the instance's log pump writes
            fh.write("".join(f"numbered {i}\n" for i in range(count)))
        await until(lambda: f"numbered {count - 1}" in views["gpu2:r1"].logs, what="the lines in the ring")
        assert views["gpu2:r1"].status.log_path is None  # no file here to read back from
        app.screen.query_one(FleetTable).select("gpu2:r1")
        await pilot.press("l")
        await until(lambda: isinstance(app.screen, LogScreen), what="the log screen")
        view = app.screen.query_one(LogView)
        first = next(line for line in view.lines if line.startswith("numbered "))
        n = int(first.split()[1])
        assert n >= SCROLLBACK_CHUNK  # the ring dropped the first ones
        await pilot.press("home")
        await until(lambda: f"numbered {n - 1}" in view.lines, what="older lines read back from gpu2")
        lines = list(view.lines)
        assert lines.index(f"numbered {n - 1}") + 1 == lines.index(first)  # in order, no gap
        assert f"numbered {n - SCROLLBACK_CHUNK // 2}" in lines
        assert await app.supervisor.older_lines("gpu2:r1", ["no such line"], 3) is None
        assert await app.supervisor.older_lines("a", [first], 3) is None  # this machine's: not in a's log
        await app.supervisor.stop(["a"])
        await app.bridge.close()


def test_ps_with_host_lists_both_machines_sessions(tmp_path: Path, session: str, hosts: Path) -> None:
    remote_path = write_layout(tmp_path, "far" + session, [sim_instance("r1")], "remote.toml")
    assert on_host("gpu2", sys.executable, "-m", "vtui", "up", str(remote_path), gpu=False).returncode == 0
    local_path = write_layout(tmp_path, session, [sim_instance("a")])
    up = subprocess.run(
        [sys.executable, "-m", "vtui", "up", str(local_path)], capture_output=True, timeout=120
    )
    assert up.returncode == 0, up.stderr

    def ps(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "vtui", "ps", str(local_path), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    listed = ps("--host", "me@gpu2", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {(r["host"], r["name"]): r for r in json.loads(listed.stdout)}
    assert set(rows) == {(None, "a"), ("gpu2", "r1")}
    assert rows[("gpu2", "r1")]["state"] == "ready"
    text = ps("--host", "me@gpu2").stdout.splitlines()
    assert text[1].split()[:3] == ["NAME", "HOST", "STATE"]
    assert any(line.split()[:3] == ["r1", "gpu2", "ready"] for line in text)
    (hosts / "gpu3").mkdir()
    (hosts / "gpu3" / "down").touch()
    lost = ps("--host", "me@gpu2", "--host", "me@gpu3", "--json")
    assert lost.returncode == 1 and "me@gpu3: ssh: connect to host gpu3 port 22" in lost.stderr
    assert {r["host"] for r in json.loads(lost.stdout)} == {None, "gpu2"}  # what answered is listed


def test_the_ssh_children_die_with_a_killed_dashboard(tmp_path: Path) -> None:
    """A `kill -9` of the dashboard leaves no `ssh -N` forward behind (they would hold on forever)."""
    script = (
        "import asyncio, sys\n"
        "from vtui.service.sshforward import die_with_parent\n"
        "async def main():\n"
        "    p = await asyncio.create_subprocess_exec('sleep', '120', preexec_fn=die_with_parent)\n"
        "    print(p.pid, flush=True)\n"
        "    await asyncio.sleep(120)\n"
        "asyncio.run(main())\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = psutil.Process(int(parent.stdout.readline()))
    assert child.is_running()
    parent.kill()
    parent.wait(10)
    child.wait(10)  # raises TimeoutExpired if it outlived the parent
