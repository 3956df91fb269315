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
