"""supervisor.killers: known killers of vLLM processes found in injected process lists, and the check lines."""

from __future__ import annotations

import os

from vtui.supervisor.killers import Killer, ProcInfo, audit, classify, find_killers, scan_processes, warnings


def P(pid: int, *argv: str) -> ProcInfo:
    return ProcInfo(pid, argv)


PROCS = [
    P(10, "/usr/bin/python3", "/usr/local/bin/vllm-cli", "status"),
    P(11, "python", "-m", "vllm_cli", "status"),
    P(12, "bash", "benchmarks/auto_tune/auto_tune.sh"),
    P(13, "pkill", "-f", "vllm"),
    P(14, "/usr/bin/killall", "-9", "VLLM::EngineCore"),
    P(15, "/bin/kill", "-TERM", "4242"),
    P(16, "/bin/kill", "-TERM", "999"),  # not one of ours
    P(17, "pkill", "-f", "llama-server"),  # not vLLM
    P(18, "vllm", "serve", "Qwen/Qwen3-8B"),  # the victim itself
    P(19, "grep", "vllm-cli"),  # mentions it, is not it
    P(20, "python3", "-c", "import vllm_cli"),
]


def test_each_known_killer_is_found_and_nothing_else():
    found = find_killers(PROCS, target_pids={4242})
    assert [(k.pid, k.kind) for k in found] == [
        (10, "vllm-cli"),
        (11, "vllm-cli"),
        (12, "auto_tune"),
        (13, "pkill"),
        (14, "killall"),
        (15, "kill"),
    ]
    assert found[3] == Killer(13, "pkill", "pkill -f vllm")
    assert found[3].describe() == "pkill (pid 13: pkill -f vllm)"


def test_excluded_pids_and_plain_kill_without_targets():
    assert classify(P(15, "/bin/kill", "-TERM", "4242")) is None  # no target pids: cannot tell
    assert [k.pid for k in find_killers(PROCS[:2], exclude={10})] == [11]


def test_scan_reads_proc_cmdlines(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cmdline").write_bytes(b"pkill\0-f\0vllm\0")
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "cmdline").write_bytes(b"")  # a kernel thread
    (tmp_path / "self").mkdir()
    assert scan_processes(tmp_path) == [P(7, "pkill", "-f", "vllm")]
    assert any(p.pid == os.getpid() for p in scan_processes())  # the real /proc
    assert audit(processes=[P(os.getpid(), "pkill", "-f", "vllm")]) == []  # never itself


def test_check_warnings_name_installed_and_running_killers():
    lines = warnings(processes=PROCS[:1], which=lambda name: f"/usr/local/bin/{name}")
    assert lines[0].startswith("vllm-cli (/usr/local/bin/vllm-cli) is installed")
    assert lines[1].startswith(
        "vllm-cli (pid 10: /usr/bin/python3 /usr/local/bin/vllm-cli status) is running"
    )
    assert warnings(processes=[], which=lambda name: None) == []


def test_vtui_check_prints_killer_warnings(monkeypatch, capsys):
    import argparse

    from vtui.commands import check

    monkeypatch.setattr(check, "killer_warnings", lambda: ["pkill (pid 13: pkill -f vllm) is running: x"])
    assert check.run(argparse.Namespace(layout="demo")) == 0
    out = capsys.readouterr().out
    assert "warning: pkill (pid 13: pkill -f vllm) is running: x" in out and "1 warning(s)" in out
