"""`vtui sessions install-unit` / `remove-unit`: a systemd user unit that keeps a session's supervisor
running, written by the systemd export, checked by `systemd-analyze verify` where it is installed; the
systemctl runner is a fake here (no systemd needed). And the supervisor's `--wait-lock`: the unit's
supervisor waits for the one a command started, then takes the session over."""

from __future__ import annotations

import shutil
import subprocess
import threading

import pytest

from vtui.cli import main
from vtui.commands import _unit
from vtui.service import __main__ as service_main

LAYOUT = """[session]
name = "lab"

[[instance]]
name = "a"
engine = "sim"
model = "Qwen/Qwen3-0.6B"
port = 18431

[instance.flags]
api-key = "${LAB_KEY}"
"""


class FakeSystemctl:
    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    def __call__(self, args):
        self.calls.append(list(args))
        if self.fail and args[0] == self.fail:
            return subprocess.CompletedProcess(args, 1, "", "Failed to connect to bus: No medium found\n")
        return subprocess.CompletedProcess(args, 0, "", "")


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("LAB_KEY", "sk-not-for-the-unit")
    layout = tmp_path / "lab.toml"
    layout.write_text(LAYOUT)
    fake = FakeSystemctl()
    monkeypatch.setattr(_unit, "SYSTEMCTL", fake)
    return layout, fake, tmp_path / "xdg" / "systemd" / "user" / "vtui-session-lab.service"


def test_install_writes_and_enables_the_unit_remove_takes_it_away(setup, capsys):
    layout, fake, unit = setup
    assert main(["sessions", "install-unit", str(layout)]) == 0
    assert fake.calls == [
        ["show-environment"],
        ["daemon-reload"],
        ["enable", "--now", "vtui-session-lab.service"],
    ]
    text = unit.read_text()
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert "vtui.service --layout " + str(layout.resolve()) + " --wait-lock --idle inf" in exec_start
    assert "KillMode=process" in text  # a stop or restart ends the supervisor alone, never the instances
    assert "Restart=on-failure" in text and "WantedBy=default.target" in text
    assert "(LAB_KEY)" in text and "sk-not-for-the-unit" not in text  # the variable's name, never its value
    assert "loginctl enable-linger" in capsys.readouterr().out

    fake.calls.clear()
    assert main(["sessions", "remove-unit", str(layout)]) == 0
    assert fake.calls == [["disable", "--now", "vtui-session-lab.service"], ["daemon-reload"]]
    assert not unit.exists()
    assert main(["sessions", "remove-unit", str(layout)]) == 0  # nothing installed: said, no systemctl
    assert "not installed" in capsys.readouterr().out and len(fake.calls) == 2


def test_remove_by_session_name_when_the_layout_is_gone(setup):
    layout, fake, unit = setup
    assert main(["sessions", "install-unit", str(layout)]) == 0
    layout.unlink()
    assert main(["sessions", "remove-unit", "lab"]) == 0
    assert not unit.exists() and fake.calls[-2] == ["disable", "--now", "vtui-session-lab.service"]


def test_a_failing_systemctl_is_one_line_and_exit_1(setup, monkeypatch, capsys):
    layout, _, _ = setup
    monkeypatch.setattr(_unit, "SYSTEMCTL", FakeSystemctl(fail="daemon-reload"))
    assert main(["sessions", "install-unit", str(layout)]) == 1
    err = capsys.readouterr().err
    assert (
        err
        == "vtui sessions install-unit: systemctl --user daemon-reload: Failed to connect to bus: No medium found\n"
    )


def test_systemd_analyze_verifies_the_unit(setup, tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    layout, _, unit = setup
    assert main(["sessions", "install-unit", str(layout)]) == 0
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    done = subprocess.run(
        [analyze, "--user", "verify", str(unit)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(runtime), "HOME": str(tmp_path)},
        timeout=60,
    )
    if "Failed to initialize manager" in done.stderr:  # no user manager can be set up here
        done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr


def test_the_units_supervisor_waits_for_the_running_one_then_takes_over():
    held = service_main.acquire_lock("lab")
    assert held is not None
    assert service_main.acquire_lock("lab") is None  # a command's start gives up: one supervisor
    got: list[int | None] = []
    waiter = threading.Thread(target=lambda: got.append(service_main.acquire_lock("lab", wait=True)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and got == []  # waiting while the other holds the session
    service_main.os.close(held)  # that supervisor exits
    waiter.join(10)
    assert got and got[0] is not None
    service_main.os.close(got[0])
