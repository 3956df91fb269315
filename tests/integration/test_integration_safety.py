"""Issue 12's defects against real processes: vtui never signals a process that is not provably its own (a
recycled pid/pgid/sid in a run record), the API key never shows in a record, JSON output, log or command
line, and `vtui down` drains requests in flight before the SIGTERM (the stop event counts what it cut)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from vtui.cli import main
from vtui.core.runstate import RunRecord, RunStore
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.launcher import OsLauncher

from .conftest import alive, marked, sim_instance, write_layout

pytestmark = pytest.mark.timeout(120)


def vtui(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def stranger():
    """A `sleep 900` in its own session (pid == pgid == sid): a process that is not vtui's."""
    proc = subprocess.Popen(["sleep", "900"], start_new_session=True)
    assert os.getpgid(proc.pid) == proc.pid == os.getsid(proc.pid)
    yield proc
    proc.kill()
    proc.wait()


def dead_pid() -> int:
    """A pid that no process has any more."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def planted_record(session: str, name: str, stranger: subprocess.Popen, tmp_path: Path) -> RunRecord:
    """A run record as an old vtui left it, whose recorded group, session and pump are now the stranger's."""
    return RunRecord(
        session=session,
        name=name,
        pid=dead_pid(),
        create_time=time.time() - 3600,
        pgid=stranger.pid,
        sid=stranger.pid,
        port=1,
        log_path=str(tmp_path / f"{name}.log"),
        argv=[sys.executable, "-m", "vtui.sim", "m"],
        flags={},
        spec={"name": name, "model": "m", "port": 1, "engine": "sim"},
        started_at=time.time() - 3600,
        pump_pid=stranger.pid,
    )


def test_recycled_pgid_in_a_removed_instances_record_survives_down(
    tmp_path: Path, session: str, stranger: subprocess.Popen
) -> None:
    path = write_layout(tmp_path, session, [sim_instance("kept")])
    RunStore().save(planted_record(session, "removed", stranger, tmp_path))
    down = vtui("down", str(path), "--grace", "1")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "removed: stopped" in down.stdout
    time.sleep(0.3)
    assert stranger.poll() is None and alive(stranger.pid), "vtui down killed a process that was not its own"
    assert RunStore().load(session, "removed") is None  # the stale record is gone


def test_recycled_ids_of_an_adopted_record_are_left_alone(
    tmp_path: Path, session: str, stranger: subprocess.Popen
) -> None:
    """The same through the launcher directly, for every stop path (down, sweeps of dead records): a
    handle whose leader is gone and whose pgid/sid/pump are a stranger's signals nothing."""
    record = planted_record(session, "old", stranger, tmp_path)
    handle = ProcessHandle(
        pid=record.pid,
        create_time=record.create_time,
        pgid=record.pgid,
        sid=record.sid,
        key=record.key,
        log_path=Path(record.log_path),
        argv=tuple(record.argv),
        pump_pid=record.pump_pid,
    )
    launcher = OsLauncher(grace=0.5)
    assert launcher.tree(handle) == {}
    report = launcher.stop(handle)
    assert report.killed == () and report.leftovers == ()
    time.sleep(0.2)
    assert stranger.poll() is None


def test_api_key_never_in_records_json_logs_or_argv(tmp_path: Path, session: str) -> None:
    key = "sk-vtui-test-" + os.urandom(8).hex()
    env = os.environ | {"VTUI_TEST_SECRET": key}
    table = sim_instance("guarded")
    table["flags"]["api-key"] = "${VTUI_TEST_SECRET}"
    path = write_layout(tmp_path, session, [table])
    outputs: list[str] = []
    argvs: list[str] = []

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        result = vtui(*args, env=env)
        outputs.extend([result.stdout, result.stderr])
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    def collect_argv() -> None:
        procs = marked(session + "/")
        assert procs, "the instance is not running"
        for proc in procs:
            argvs.append(Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace"))

    run("up", str(path))
    collect_argv()
    rows = json.loads(run("ps", str(path), "--json").stdout)
    assert rows[0]["state"] == "ready" and rows[0]["flags"]["api-key"] == "***"
    port = rows[0]["port"]
    # The key is really in force: without it /v1 is refused, with it answered.
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 401
    headers = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", headers=headers, timeout=5).status_code == 200
    run("restart", str(path), "guarded", "--set", "max-num-seqs=8")
    collect_argv()
    record_texts = [f.read_text() for f in RunStore().folder.glob("*.json")]
    assert record_texts and all('"last_good_flags"' in t for t in record_texts)
    assert any('"api-key": "***"' in t for t in record_texts)
    outputs.append(run("ps", str(path), "--json").stdout)
    run("down", str(path))
    logs = [f.read_text(errors="replace") for f in (Path(os.environ["VTUI_STATE_DIR"]) / "logs").glob("*")]
    assert logs
    everything = {
        "records": record_texts,
        "outputs": outputs,
        "logs": logs,
        "argv": argvs,
        "state files": [
            f.read_text(errors="replace")
            for f in Path(os.environ["VTUI_STATE_DIR"]).rglob("*")
            if f.is_file()
        ],
    }
    leaks = [where for where, texts in everything.items() if any(key in t for t in texts)]
    assert leaks == []


class Stream(threading.Thread):
    """One streamed completion read to its end: how many tokens came and whether it finished."""

    def __init__(self, url: str, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.url, self.max_tokens = url, max_tokens
        self.started = threading.Event()
        self.finish: str | None = None
        self.done = False
        self.chunks = 0

    def run(self) -> None:
        body = {"model": "Qwen/Qwen3-0.6B", "prompt": "hi", "max_tokens": self.max_tokens}
        body |= {"ignore_eos": True, "stream": True}
        try:
            with httpx.stream("POST", self.url + "/v1/completions", json=body, timeout=60) as response:
                for line in response.iter_lines():
                    if line == "data: [DONE]":
                        self.done = True
                    elif line.startswith("data: "):
                        self.chunks += 1
                        self.started.set()
                        choice = json.loads(line[6:])["choices"][0]
                        self.finish = choice.get("finish_reason") or self.finish
        except httpx.HTTPError:
            pass
        finally:
            self.started.set()


def _streams(port: int, n: int, max_tokens: int) -> list[Stream]:
    streams = [Stream(f"http://127.0.0.1:{port}", max_tokens) for _ in range(n)]
    for s in streams:
        s.start()
    for s in streams:
        assert s.started.wait(20) and s.chunks, "the stream did not start"
    return streams


def test_down_waits_for_open_streams_to_finish(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("one", sim_speed=0.5)])
    assert vtui("up", str(path)).returncode == 0
    port = json.loads(vtui("ps", str(path), "--json").stdout)[0]["port"]
    streams = _streams(port, 2, 150)
    started = time.monotonic()
    down = vtui("down", str(path), "--grace", "30")
    took = time.monotonic() - started
    for s in streams:
        s.join(10)
    assert down.returncode == 0, down.stdout + down.stderr
    assert [(s.finish, s.done) for s in streams] == [("length", True)] * 2, down.stdout
    assert "cut" not in down.stdout
    assert "one: 2 request(s) in flight when the stop began, all ended within" in down.stdout, down.stdout
    assert took < 25, f"the drain waited past the streams' end: {took:.1f}s"


def test_down_cuts_what_outlasts_the_grace_and_says_how_many(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("one", sim_speed=0.02)])
    assert vtui("up", str(path)).returncode == 0
    port = json.loads(vtui("ps", str(path), "--json").stdout)[0]["port"]
    streams = _streams(port, 3, 3000)
    started = time.monotonic()
    down = vtui("down", str(path), "--grace", "1.5")
    took = time.monotonic() - started
    for s in streams:
        s.join(10)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "one: 3 request(s) still in flight after" in down.stdout and "were cut" in down.stdout
    assert not any(s.finish == "length" for s in streams)
    assert took < 20
    assert marked(session + "/") == []


def test_sim_load_is_not_counted_as_requests_in_flight(tmp_path: Path, session: str) -> None:
    """The sim's own synthetic load (--sim-load) has no client to cut: a stop does not wait for it."""
    path = write_layout(tmp_path, session, [sim_instance("busy", sim_load=4)])
    assert vtui("up", str(path)).returncode == 0
    started = time.monotonic()
    down = vtui("down", str(path), "--grace", "20")
    assert down.returncode == 0 and "cut" not in down.stdout
    assert "busy: no request in flight when the stop began" in down.stdout, down.stdout
    assert time.monotonic() - started < 15


def test_in_process_down_of_nothing_running_signals_nothing(
    tmp_path: Path, session: str, stranger: subprocess.Popen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`vtui.cli.main` in-process, with os.kill/os.killpg watched: no signal goes to the stranger."""
    sent: list[tuple[int, int]] = []
    real_kill, real_killpg = os.kill, os.killpg
    monkeypatch.setattr(os, "kill", lambda pid, sig: (sent.append((pid, sig)), real_kill(pid, sig))[1])
    monkeypatch.setattr(os, "killpg", lambda pg, sig: (sent.append((pg, sig)), real_killpg(pg, sig))[1])
    path = write_layout(tmp_path, session, [sim_instance("kept")])
    RunStore().save(planted_record(session, "removed", stranger, tmp_path))
    assert main(["down", str(path), "--grace", "0.5"]) == 0
    assert [s for s in sent if s[0] == stranger.pid and s[1] != 0] == []
    assert stranger.poll() is None
