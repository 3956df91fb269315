"""Rotated log writer and the rotation-aware tailer (pure file I/O, no processes)."""

from __future__ import annotations

from vtui.supervisor.logfile import LogTailer, RotatingWriter, read_tail


def test_writer_caps_every_file_and_keeps_lines_whole(tmp_path):
    path = tmp_path / "x.log"
    writer = RotatingWriter(path, max_bytes=1000, backups=2)
    for i in range(500):
        writer.write(f"line {i:04d}\n".encode())
    writer.close()
    files = [path, tmp_path / "x.log.1", tmp_path / "x.log.2"]
    assert all(f.stat().st_size <= 1000 for f in files) and not (tmp_path / "x.log.3").exists()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    for f in files:
        assert all(line.startswith("line ") for line in f.read_text().splitlines())
    assert read_tail(path, 3) == ["line 0497", "line 0498", "line 0499"]
    tail = read_tail(path, 150)  # reaches into x.log.1
    assert tail[0] == "line 0350" and len(tail) == 150


def test_tailer_follows_rotation_without_losing_lines(tmp_path):
    path = tmp_path / "x.log"
    writer = RotatingWriter(path, max_bytes=300, backups=5)
    writer.write(b"old run\n")
    tailer = LogTailer(path)  # created before the new run: starts at the end
    seen: list[str] = []
    for i in range(100):
        writer.write(f"l{i}\n".encode())
        if i % 7 == 0:
            seen += tailer.read()
    writer.write(b"partial")
    seen += tailer.read()
    assert seen == [f"l{i}" for i in range(100)]
    writer.write(b" line\n")
    assert tailer.read() == ["partial line"]


def test_tailer_waits_for_a_file_that_does_not_exist_yet(tmp_path):
    path = tmp_path / "late.log"
    tailer = LogTailer(path)
    assert tailer.read() == []
    path.write_text("first\nsecond\n")
    assert tailer.read() == ["first", "second"]


# -- how the child ended: the pump's exit record --------------------------------------------------------


def _pump(tmp_path, *command: str, timeout: float = 30):
    import subprocess
    import sys

    from vtui.supervisor import logfile

    exit_file = tmp_path / "x.log.exit"
    proc = subprocess.Popen(
        [
            sys.executable,
            logfile.__file__,
            "--log",
            str(tmp_path / "x.log"),
            "--exit-file",
            str(exit_file),
            "--",
        ]
        + list(command),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    return proc, int(first.split()[1]), exit_file


def test_pump_records_exit_code_and_signal(tmp_path):
    import os
    import signal
    import sys

    from vtui.supervisor.logfile import read_exit, read_tail

    proc, pid, exit_file = _pump(tmp_path, sys.executable, "-c", "raise SystemExit(3)")
    proc.wait(30)
    info = read_exit(exit_file)
    assert info is not None and (info.returncode, info.code, info.signal) == (3, 3, None)
    assert info.describe() == "exited with code 3" and info.at is not None

    proc, pid, exit_file = _pump(tmp_path, sys.executable, "-c", "import time; time.sleep(60)")
    os.kill(pid, signal.SIGTERM)  # as an outside tool would
    proc.wait(30)
    info = read_exit(exit_file)
    assert info is not None and (info.returncode, info.code, info.signal) == (-15, None, 15)
    assert info.signal_name == "SIGTERM" and info.describe().startswith("killed by SIGTERM")
    assert read_tail(tmp_path / "x.log", 1)[0].startswith(f"[vtui] process {pid} killed by SIGTERM")


def test_pump_audits_known_killers_running_when_the_child_dies(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    # a process titled like `pkill -f vllm` (a sleeping python, so nothing is really killed)
    fake = subprocess.Popen(["pkill", "-c", "import time; time.sleep(60)", "vllm"], executable=sys.executable)
    try:
        proc, pid, exit_file = _pump(tmp_path, sys.executable, "-c", "import time; time.sleep(60)")
        os.kill(pid, signal.SIGTERM)
        proc.wait(30)
    finally:
        fake.kill()
        fake.wait()
    from vtui.supervisor.logfile import read_exit

    info = read_exit(exit_file)
    assert info is not None and info.signal == 15
    assert {
        "pid": fake.pid,
        "kind": "pkill",
        "command": "pkill -c import time; time.sleep(60) vllm",
    } in info.killers
    assert f"pkill (pid {fake.pid}" in info.describe()


def test_exit_file_from_an_older_pump_still_reads(tmp_path):
    from vtui.supervisor.logfile import parse_exit

    old = parse_exit("-9\n")
    assert old is not None and (old.returncode, old.signal, old.signal_name) == (-9, 9, "SIGKILL")
    assert parse_exit("0").code == 0 and parse_exit("") is None and parse_exit("{}") is None
    assert parse_exit("garbage") is None
