"""`vtui restart --save` writes the instance's flags into the layout file as it is once READY, so edits
made to the file during the (possibly minutes long) restart are kept, not undone by the stale copy."""

from __future__ import annotations

from pathlib import Path

from vtui.commands import restart
from vtui.layouts import load_layout

BEFORE = """\
[[instance]]
name = "a"
model = "m"
port = 9001
flags.max-num-seqs = 4   # start small

[[instance]]
name = "b"
model = "m"
port = 9002
"""


def test_save_after_the_restart_keeps_edits_made_to_the_file_meanwhile(tmp_path: Path, capsys) -> None:
    path = tmp_path / "tune.toml"
    path.write_text(BEFORE, encoding="utf-8")
    running = load_layout(path).instance("a").with_flags({"max-num-seqs": 8}).flags
    edited = BEFORE.replace("port = 9002\n", "port = 9003   # moved while a restarted\n")
    path.write_text(edited, encoding="utf-8")  # was: undone by the save of the layout read before
    assert restart.save_flags(path, "a", running) == (0, path)
    assert path.read_text(encoding="utf-8") == edited.replace("= 4   #", "= 8   #")


def test_save_refuses_when_the_file_lost_the_instance_or_no_longer_loads(tmp_path: Path, capsys) -> None:
    path = tmp_path / "tune.toml"
    path.write_text(BEFORE.split("\n\n")[1], encoding="utf-8")  # only b is left
    assert restart.save_flags(path, "a", {"max-num-seqs": 8})[0] == 1
    assert "no instance a any more: not saved" in capsys.readouterr().err
    path.write_text(BEFORE.replace("port = 9002", "port = 'x'"), encoding="utf-8")
    assert restart.save_flags(path, "a", {"max-num-seqs": 8})[0] == 1
    assert "was not saved" in capsys.readouterr().err
    assert "port = 'x'" in path.read_text(encoding="utf-8")
