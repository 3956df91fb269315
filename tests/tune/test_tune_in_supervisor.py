"""A tune is the session supervisor's job, on the sim: the `vtui tune` client that started it is killed
mid-tune and the tune still finishes (its verdict applied or the original flags restored); a tune whose
client is gone is cancelled from another client (`--cancel`) and puts the original flags back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vtui.service.client import ServiceClient

from .conftest import QUICK, instance_row, vtui, write_layout

pytestmark = pytest.mark.slow


def session_of(layout: Path) -> str:
    import tomllib

    return tomllib.loads(layout.read_text())["session"]["name"]


def start_client(layout: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "vtui", "tune", str(layout), "a", *QUICK, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )


def tune_doc(client: ServiceClient) -> dict:
    return client.get("/tune?name=a")["tune"]


def wait(client: ServiceClient, check, timeout: float = 240.0) -> dict:
    deadline = time.monotonic() + timeout
    doc: dict = {}
    while time.monotonic() < deadline:
        doc = tune_doc(client) or {}
        if check(doc):
            return doc
        time.sleep(0.2)
    raise AssertionError(f"the tune never got there: {json.dumps(doc)[:2000]}")


def kill_client_after_first_trial(layout: Path, client: ServiceClient, *extra: str) -> None:
    proc = start_client(layout, *extra)
    try:
        wait(client, lambda d: d.get("state") == "running" and len(d.get("trials") or []) >= 1)
    finally:
        proc.kill()  # the client goes, without a word to the supervisor
        proc.communicate(timeout=30)


def test_the_tune_finishes_when_its_client_is_killed(tmp_path: Path) -> None:
    layout = write_layout(tmp_path, [("a", {"max-num-seqs": 2})])
    assert vtui("up", str(layout)).returncode == 0
    original = instance_row(layout)["flags"]
    client = ServiceClient(session_of(layout))
    kill_client_after_first_trial(layout, client, "--max-trials", "4")
    doc = wait(client, lambda d: d.get("state") != "running")
    assert doc["state"] == "done", doc["message"]
    result = doc["result"]
    assert result["trials"][0]["measurements"] >= 3  # the baseline: 3 runs, its spread reported
    assert result["baseline"]["spread"]["n"] >= 3 and "verdict" in result
    row = instance_row(layout)
    assert row["state"] == "ready"
    expected = result["best"]["flags"] if result["applied"] else original
    for key, value in expected.items():
        if key in original or result["applied"]:
            assert row["flags"].get(key, value) == value, (key, row["flags"])
    if not result["applied"]:
        assert row["flags"] == original


def test_a_cancel_from_another_client_restores_the_original_flags(tmp_path: Path) -> None:
    layout = write_layout(tmp_path, [("a", {"max-num-seqs": 2})])
    assert vtui("up", str(layout)).returncode == 0
    original = instance_row(layout)["flags"]
    client = ServiceClient(session_of(layout))
    kill_client_after_first_trial(layout, client, "--max-trials", "12", "--num-requests", "120")
    assert tune_doc(client)["state"] == "running"
    cancel = vtui("tune", str(layout), "a", "--cancel", timeout=300)
    assert cancel.returncode == 130, cancel.stdout + cancel.stderr  # it followed the restore to its end
    doc = tune_doc(client)
    assert doc["state"] == "aborted" and "original flags restored" in doc["message"], doc["message"]
    row = instance_row(layout)
    assert row["state"] == "ready" and row["flags"] == original
    again = vtui("tune", str(layout), "a", "--cancel", timeout=30)
    assert again.returncode == 2 and "no tune of a is running" in again.stderr
