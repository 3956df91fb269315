"""Stopping and listing never need a secret: with the `${VAR}` holding the API key unset, `vtui ps` and
`vtui down` work on a running session, while `up` and `check` still report the variable."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from vtui.cli import main

VAR = "VTUI_TEST_UNSET_API_KEY"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _layout(tmp_path: Path) -> Path:
    path = tmp_path / "secret.toml"
    path.write_text(
        f"""[session]
name = "unset-secret-{tmp_path.name}"

[[instance]]
name = "keyed"
engine = "sim"
model = "Qwen/Qwen3-0.6B"
port = {_free_port()}
max_restarts = 0

[instance.flags]
max-model-len = 4096
sim-startup-scale = 0.0
api-key = "${{{VAR}}}"
""",
        encoding="utf-8",
    )
    return path


def _ps(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    capsys.readouterr()
    assert main(["ps", str(path), "--json"]) == 0
    # the first JSON value: an earlier in-process `up`'s feed thread may still print its events after it
    return json.JSONDecoder().raw_decode(capsys.readouterr().out)[0]


def test_check_and_up_report_the_unset_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(VAR, raising=False)
    path = _layout(tmp_path)
    assert main(["check", str(path)]) == 2
    assert f"instance[0].flags.api-key: undefined environment variable ${{{VAR}}}" in capsys.readouterr().out
    assert main(["up", str(path)]) == 2
    assert f"undefined environment variable ${{{VAR}}}" in capsys.readouterr().err
    assert [row["state"] for row in _ps(path, capsys)] == ["stopped"]  # nothing was started


def test_ps_and_down_work_with_the_secret_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _layout(tmp_path)
    monkeypatch.setenv(VAR, "sk-test-unset-secret")
    try:
        assert main(["up", str(path), "--timeout", "60"]) == 0
        monkeypatch.delenv(VAR)
        (row,) = _ps(path, capsys)
        assert row["state"] == "ready" and row["pid"]
        assert "sk-test-unset-secret" not in json.dumps(row)
        assert main(["down", str(path)]) == 0
        assert [r["state"] for r in _ps(path, capsys)] == ["stopped"]
    finally:
        monkeypatch.setenv(VAR, "sk-test-unset-secret")
        main(["down", str(path)])


def test_a_supervisor_started_without_the_secret_gets_it_from_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vtui ps` in a shell without the key starts the session supervisor; a later `vtui up` from a
    shell that has it hands the layout's ${VAR}s over, and the instance runs with that key."""
    import httpx

    path = _layout(tmp_path)
    monkeypatch.delenv(VAR, raising=False)
    try:
        assert [row["state"] for row in _ps(path, capsys)] == ["stopped"]  # the supervisor now runs
        monkeypatch.setenv(VAR, "sk-test-handed-over")
        assert main(["up", str(path), "--timeout", "60"]) == 0
        (row,) = _ps(path, capsys)
        assert row["state"] == "ready"
        url = f"http://127.0.0.1:{row['port']}/v1/models"
        assert httpx.get(url, timeout=5).status_code == 401
        ok = httpx.get(url, headers={"Authorization": "Bearer sk-test-handed-over"}, timeout=5)
        assert ok.status_code == 200
    finally:
        monkeypatch.setenv(VAR, "sk-test-handed-over")
        main(["down", str(path)])
