"""A layout that uses flags only vLLM 0.34 has works in every command when the installed vLLM is 0.34
(a fake install: a real argparse parser with 0.34's new flags, whose `vllm serve` runs vtui's simulated
engine): check, up, ps, logs, down, export and the dashboard's load. Before the one resolver
(`flagschema.load_resolved`), ps, down, logs, export and the dashboard read the bundled 0.32 table and
refused the layout with exit 2."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from _support.fake_vllm import make_vllm_034

from vtui.cli import main
from vtui.telemetry import flagschema


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    flagschema._MEMO.clear()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _layout(tmp_path: Path, vllm: Path) -> Path:
    path = tmp_path / "v034.toml"
    path.write_text(
        f"""[session]
name = "v034-{tmp_path.name}"

[[instance]]
name = "new"
model = "Qwen/Qwen3-0.6B"
port = {_free_port()}
command = ["{vllm}", "serve"]
max_restarts = 0

[instance.flags]
max-model-len = 4096
enable-extensible-kv-cache = false
cache-aware-admission-window = 64
""",
        encoding="utf-8",
    )
    return path


def test_a_layout_with_034_only_flags_is_refused_by_no_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vllm = make_vllm_034(tmp_path / "fake")
    path = _layout(tmp_path, vllm)
    assert main(["check", str(path)]) == 0
    assert "new: flags: installed vLLM 0.34.0" in capsys.readouterr().out

    assert main(["export", str(path), "--to", "vllm-config"]) == 0
    exported = capsys.readouterr().out
    assert "cache-aware-admission-window: 64" in exported and "enable-extensible-kv-cache" in exported

    from vtui.ui.app import resolve_layout  # the dashboard's load of `vtui LAYOUT`

    flags = resolve_layout(path).instance("new").flags
    assert flags["cache-aware-admission-window"] == 64 and flags["enable-extensible-kv-cache"] is False

    try:
        assert main(["up", str(path), "--timeout", "60"]) == 0
        capsys.readouterr()
        assert main(["ps", str(path), "--json"]) == 0
        (row,) = json.JSONDecoder().raw_decode(capsys.readouterr().out)[0]
        assert row["state"] == "ready"
        assert main(["logs", str(path), "new", "--json"]) == 0
        assert json.JSONDecoder().raw_decode(capsys.readouterr().out)[0]["name"] == "new"
        assert main(["down", str(path)]) == 0
    finally:
        main(["down", str(path)])
    served = (vllm.parent / "argv.log").read_text().splitlines()
    assert served and "--cache-aware-admission-window 64" in served[0]
    assert "--no-enable-extensible-kv-cache" in served[0]


def test_the_same_flags_are_refused_where_the_installed_vllm_lacks_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: an installed vLLM whose parser has no such flag refuses it, in every command."""
    from _support.fake_vllm import make_fake_vllm

    path = _layout(tmp_path, make_fake_vllm(tmp_path / "fake", version="0.99.0"))
    assert main(["check", str(path)]) == 2
    assert main(["export", str(path), "--to", "vllm-config"]) == 2
    assert main(["ps", str(path)]) == 2
    assert "cache-aware-admission-window: unknown flag" in capsys.readouterr().err
