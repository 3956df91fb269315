"""Rotated log writer and the rotation-aware tailer (pure file I/O, no processes)."""

from __future__ import annotations

from vtui.core.logfile import LogTailer, RotatingWriter, read_tail


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
