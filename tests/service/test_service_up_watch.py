"""`vtui up --watch` rides out the end of its session supervisor: after a kill -9 of the supervisor it
starts a new one (which re-adopts the instance, same pid), follows its feed, and shows what that one
does (a crash of the instance and the restart the policy makes)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from .conftest import ps_rows, sim_instance, supervisors, wait_for, write_layout

pytestmark = [pytest.mark.timeout(150), pytest.mark.slow]


class Lines:
    """stdout + stderr of a child, line by line, read in a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stream = proc.stdout
        threading.Thread(target=lambda: [self._queue.put(line) for line in stream], daemon=True).start()

    def wait_for(self, text: str, timeout: float = 40.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in self.seen:
                if text in line:
                    self.seen.remove(line)
                    return line
            try:
                self.seen.append(self._queue.get(timeout=0.2))
            except queue.Empty:
                continue
        raise AssertionError(f"no line with {text!r} in {self.seen}")


def test_up_watch_reattaches_to_a_new_supervisor_after_a_kill_9(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a", max_restarts=3)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "vtui", "up", str(path), "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )
    try:
        out = Lines(proc)
        out.wait_for("following the session supervisor")
        pid = ps_rows(str(path))["a"]["pid"]
        [old] = supervisors(session)
        old.kill()
        old.wait(5)

        out.wait_for("went away; reconnecting")
        line = out.wait_for("reattached to the session supervisor")
        [new] = wait_for(lambda: supervisors(session), what="a new supervisor")
        assert new.pid != old.pid and f"pid {new.pid}" in line and "a ready" in line
        assert ps_rows(str(path))["a"]["pid"] == pid  # re-adopted, not relaunched

        psutil.Process(pid).kill()  # the new supervisor's policy restarts it; --watch shows both
        out.wait_for("a: crashed")
        out.wait_for("a: ready")
        assert proc.poll() is None  # still watching
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
