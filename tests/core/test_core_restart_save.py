"""`vtui restart NAME --set … --unset … --save` end to end on the fake engine: once READY the flags are
written into the layout file with only their lines changed; a result that would not validate is refused
before anything restarts and the file stays as it was."""

from __future__ import annotations

import json
import sys

import pytest

from vtui.cli import main

from .conftest import FAKE_ENGINE, free_port, marked

pytestmark = pytest.mark.timeout(90)


def test_restart_save_writes_only_the_changed_flag_lines(tmp_path, session_name, capsys):
    path = tmp_path / "tune.toml"
    original = f'''# tuning session, keep my notes
[session]
name = "{session_name}"

[[instance]]
name = "a"   # the one being tuned
model = "fake"
port = {free_port()}
command = ["{sys.executable}", "{FAKE_ENGINE}"]
[instance.flags]
max-num-seqs = 4   # start small
enable-prefix-caching = true
'''
    path.write_text(original, encoding="utf-8")
    assert main(["up", str(path)]) == 0
    code = main(
        [
            "restart",
            str(path),
            "a",
            "--set",
            "max-num-seqs=8",
            "--set",
            "block-size=32",
            "--unset",
            "enable-prefix-caching",
            "--save",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and f"a: flags saved to {path}" in out
    assert path.read_text(encoding="utf-8") == original.replace(
        "max-num-seqs = 4   # start small\nenable-prefix-caching = true\n",
        "max-num-seqs = 8   # start small\nblock-size = 32\n",
    )
    assert main(["ps", str(path), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["flags"] == {"max-num-seqs": 8, "block-size": 32}
    saved = path.read_text(encoding="utf-8")

    # A sim-only flag on a vllm instance parses as a flag but the layout would not load: refused, no restart.
    assert main(["restart", str(path), "a", "--set", "sim-startup-scale=0", "--save"]) == 2
    err = capsys.readouterr().err
    assert f"{path} (not saved):" in err and "instance[0].flags.sim-startup-scale" in err
    assert path.read_text(encoding="utf-8") == saved
    assert main(["ps", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["pid"] == row["pid"]
    assert main(["down", str(path)]) == 0
    assert marked(session_name) == []


def test_restart_save_writes_the_file_named_and_json_is_one_document(tmp_path, session_name, capsys):
    """`vtui restart OTHER.toml NAME --save` wrote the session's own file, not OTHER.toml; and with
    --json a plain "flags saved" line followed the JSON object, so stdout did not parse."""
    text = f'''[session]
name = "{session_name}"

[[instance]]
name = "a"
model = "fake"
port = {free_port()}
command = ["{sys.executable}", "{FAKE_ENGINE}"]
[instance.flags]
max-num-seqs = 4   # mine
'''
    own, other = tmp_path / "own.toml", tmp_path / "other.toml"
    own.write_text(text, encoding="utf-8")
    other.write_text("# a copy to tune into\n" + text, encoding="utf-8")
    assert main(["up", str(own)]) == 0
    capsys.readouterr()
    try:
        code = main(["restart", str(other), "a", "--set", "max-num-seqs=6", "--save", "--json"])
        out = capsys.readouterr().out
        assert code == 0
        row = json.loads(out)  # the whole of stdout: exactly one JSON document
        assert row["saved_to"] == str(other)
        assert "max-num-seqs = 6   # mine" in other.read_text(encoding="utf-8")
        assert other.read_text(encoding="utf-8").startswith("# a copy to tune into\n")
        assert own.read_text(encoding="utf-8") == text  # the session's own file, untouched
    finally:
        assert main(["down", str(own)]) == 0
    assert marked(session_name) == []
