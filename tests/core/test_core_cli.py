"""The headless commands end to end, in-process, on a layout whose instances run the fake engine."""

from __future__ import annotations

import json
import socket
import sys

import pytest

from vtui.cli import main

from .conftest import FAKE_ENGINE, free_port, marked

pytestmark = pytest.mark.timeout(90)


def write_layout(tmp_path, session: str, *, fail_b: bool = False, port_a: int | None = None):
    env_b = (
        '{ FAKE_FAIL_STARTUP = "User-specified max_model_len (4096) is greater than the derived" }'
        if fail_b
        else "{}"
    )
    text = f'''
[session]
name = "{session}"

[[instance]]
name = "a"
model = "fake"
port = {port_a or free_port()}
command = ["{sys.executable}", "{FAKE_ENGINE}"]
env = {{ FAKE_SPAWN_CHILD = "1" }}
[instance.flags]
max-num-seqs = 4

[[instance]]
name = "b"
model = "fake"
port = {free_port()}
command = ["{sys.executable}", "{FAKE_ENGINE}"]
env = {env_b}
restart = "never"
'''
    path = tmp_path / "layout.toml"
    path.write_text(text)
    return path


def ps_json(capsys) -> dict[str, dict]:
    capsys.readouterr()
    assert main(["ps", "--json"]) == 0
    return {row["name"]: row for row in json.loads(capsys.readouterr().out)}


def test_up_ps_restart_logs_down(tmp_path, session_name, capsys):
    layout = write_layout(tmp_path, session_name)
    assert main(["up", str(layout)]) == 0
    out = capsys.readouterr().out
    assert "a: ready on http://127.0.0.1:" in out and "b: ready" in out
    rows = ps_json(capsys)  # no LAYOUT: the last one used
    assert {n: r["state"] for n, r in rows.items()} == {"a": "ready", "b": "ready"}
    assert set(rows["a"]) >= {"name", "state", "pid", "port", "gpus", "restarts"}
    first_pid = rows["a"]["pid"]
    assert main(["up"]) == 0  # everything already runs: adopted, nothing launched
    assert ps_json(capsys)["a"]["pid"] == first_pid
    assert main(["restart", "a", "--set", "max-num-seqs=8"]) == 0
    rows = ps_json(capsys)
    assert rows["a"]["pid"] != first_pid and rows["a"]["flags"] == {"max-num-seqs": 8}
    assert main(["logs", "a", "-n", "200"]) == 0
    assert "--max-num-seqs 8" in capsys.readouterr().out
    assert main(["down"]) == 0
    assert {r["state"] for r in ps_json(capsys).values()} == {"stopped"}
    assert marked(session_name) == []


def test_up_reports_the_root_cause_and_fails(tmp_path, session_name, capsys):
    layout = write_layout(tmp_path, session_name, fail_b=True)
    assert main(["up", str(layout), "--only", "b"]) == 1
    err = capsys.readouterr().err
    assert "b: crashed: ValueError: User-specified max_model_len (4096) is greater than the derived" in err
    assert ps_json(capsys)["b"]["state"] == "crashed"
    assert ps_json(capsys)["a"]["state"] == "stopped"  # --only: a was never started


def test_up_refuses_a_taken_port_and_starts_nothing(tmp_path, session_name, capsys):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        layout = write_layout(tmp_path, session_name, port_a=holder.getsockname()[1])
        assert main(["up", str(layout)]) == 1
        err = capsys.readouterr().err
        assert "port" in err and "already in use by pid" in err and "nothing was started" in err
        assert marked(session_name) == []


def test_restart_rejects_a_bad_value(tmp_path, session_name, capsys):
    layout = write_layout(tmp_path, session_name)
    assert main(["restart", str(layout), "a", "--set", "max-num-seqs=many"]) == 2
    assert 'expected an integer, got "many"' in capsys.readouterr().err
    assert marked(session_name) == []


def test_up_and_restart_print_their_progress_before_the_summary_and_nothing_after(
    tmp_path, session_name, capsys
):
    """The progress lines come from the supervisor's feed, in a thread: `up` waits until the feed has
    shown the states it reports, then stops following. Before, the thread printed on after `up` had
    returned: `a: ready` after the summary, or an instance's later crash in whatever came next (a
    `vtui ps --json` that then did not parse, as a CI run under load showed)."""
    import os
    import signal
    import time

    layout = write_layout(tmp_path, session_name)
    assert main(["up", str(layout)]) == 0
    lines = capsys.readouterr().out.splitlines()
    progress = next(i for i, line in enumerate(lines) if line.endswith("  a: ready"))
    summary = next(i for i, line in enumerate(lines) if "a: ready on http://127.0.0.1:" in line)
    assert progress < summary, lines
    assert main(["restart", "b"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.endswith("  b: ready") for line in lines), lines
    pid = ps_json(capsys)["a"]["pid"]
    os.kill(pid, signal.SIGKILL)  # the supervisor sees a crash and restarts it: events on the feed
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and ps_json(capsys)["a"]["pid"] in (pid, None):
        time.sleep(0.2)
    assert ps_json(capsys)["a"]["pid"] not in (pid, None)
    time.sleep(0.5)
    assert capsys.readouterr().out == ""  # no command is following the feed now
    assert main(["down"]) == 0
