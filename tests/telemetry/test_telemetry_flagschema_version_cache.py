"""The installed vLLM's version is asked once per `vllm` script (kept on disk until pip writes the
script again), not by every `ps`, `down` and `logs`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vtui.telemetry import vllmprobe


def test_a_scripts_version_is_asked_once_until_the_script_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    script = tmp_path / "venv" / "bin" / "vllm"
    script.parent.mkdir(parents=True)
    script.write_text("#!/usr/bin/env python\n")
    asked: list[list[str]] = []

    def version_of(python: list[str], timeout: float = 30.0) -> str:
        asked.append(list(python))
        return "0.34.0"

    monkeypatch.setattr(vllmprobe, "vllm_version_of", version_of)
    python = [str(script.parent / "python")]
    assert vllmprobe.script_version([str(script), "serve"], python) == "0.34.0"
    assert vllmprobe.script_version([str(script), "serve"], python) == "0.34.0"
    assert len(asked) == 1
    stat = script.stat()
    os.utime(script, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # pip wrote it again
    assert vllmprobe.script_version([str(script), "serve"], python) == "0.34.0"
    assert len(asked) == 2
    assert vllmprobe.script_version(["python", "-m", "vllm"], ["python"]) == "0.34.0"
    assert len(asked) == 3  # an interpreter command is asked each time
