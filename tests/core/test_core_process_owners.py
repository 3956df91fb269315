"""ProcessOwners: a GPU process named by its session id (one getsid, no process-table walk), another vtui
session's instance by its marker (read once), and everything else left unnamed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from vtui.supervisor.owners import ProcessOwners


def test_pids_are_named_by_session_then_marker_and_markers_are_read_once() -> None:
    sids = {10: 100, 11: 100, 12: 200, 13: 300, 14: 400}
    markers = {12: None, 200: "other/llama", 13: "s/qwen", 14: None}
    reads: list[int] = []

    def marker(pid: int) -> str | None:
        reads.append(pid)
        return markers.get(pid)

    def getsid(pid: int) -> int:
        if pid not in sids:
            raise ProcessLookupError(pid)
        return sids[pid]

    owners = ProcessOwners(
        lambda: {100: "qwen"}, session="s", extra=lambda: {99: "attached"}, getsid=getsid, marker=marker
    )
    got = owners([10, 11, 12, 13, 14, 15, 99])
    assert got == {10: "qwen", 11: "qwen", 12: "other/llama", 13: "qwen", 99: "attached"}
    first = list(reads)
    assert owners([12, 13, 14]) == {12: "other/llama", 13: "qwen"}
    assert reads == first  # cached while the pid keeps its session
    owners([10])
    owners([12])
    assert len(reads) > len(first)  # forgotten once gone from the GPUs, read again when back


def test_a_real_child_in_its_own_session_is_named_by_its_session_and_marker() -> None:
    env = dict(os.environ, VTUI_INSTANCE="elsewhere/embed")
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True, env=env
    )
    try:
        # until the child has exec'ed: before that its /proc environ is the parent's, without the marker
        # (the floors run once read it that early)
        deadline = time.monotonic() + 10
        while b"time.sleep" not in Path(f"/proc/{child.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the child never exec'ed"
            time.sleep(0.01)
        mine = ProcessOwners(lambda: {child.pid: "embed"}, session="here")
        assert mine([child.pid]) == {child.pid: "embed"}
        theirs = ProcessOwners(lambda: {}, session="here")
        assert theirs([child.pid, os.getpid()]) == {child.pid: "elsewhere/embed"}
    finally:
        child.kill()
        child.wait()
