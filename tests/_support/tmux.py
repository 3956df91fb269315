"""Test support shared by the tmux tests (tests/ui, tests/e2e): one private tmux server per test."""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
import uuid


class Tmux:
    """One private tmux server (own socket) with one session; keys in, screen text out."""

    def __init__(self) -> None:
        self.socket = f"vtui-test-{uuid.uuid4().hex[:8]}"
        self.session = "vtui"
        self.last = ""

    def run(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True, timeout=10
        ).stdout

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def screen(self) -> str:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.last = self.run("capture-pane", "-p", "-t", self.session)
        return self.last

    def wait_for(self, pattern: str, timeout: float = 30.0, fail_on: str | None = None) -> re.Match[str]:
        """The first match of regex `pattern` on screen; fails early when `fail_on` shows up."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            screen = self.screen()
            if match := re.search(pattern, screen):
                return match
            if fail_on and re.search(fail_on, screen):
                raise AssertionError(f"{fail_on!r} on screen while waiting for {pattern!r}")
            time.sleep(0.3)
        raise AssertionError(f"{pattern!r} not on screen after {timeout:.0f}s:\n{self.last}")

    def wait_gone(self, pattern: str, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        while re.search(pattern, self.screen()):
            if time.monotonic() > end:
                raise AssertionError(f"{pattern!r} still on screen after {timeout:.0f}s")
            time.sleep(0.1)

    def alive(self) -> bool:
        try:
            return self.session in self.run("list-sessions", "-F", "#{session_name}")
        except subprocess.CalledProcessError:
            return False

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)
