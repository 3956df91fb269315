"""How vtui reaches other hosts: the ssh client (`$VTUI_SSH`, split like a shell line; default `ssh`),
the options every call gets (never a password prompt, a dead link noticed in ~15 s), the vtui command
on the other side (`$VTUI_REMOTE_VTUI`, default `vtui`) and the label a host is shown by. Stdlib
only: `vtui ps --host` imports it."""

from __future__ import annotations

import os
import shlex
import subprocess

__all__ = ["SSH_OPTIONS", "host_label", "remote_vtui", "run_remote", "ssh_command"]

SSH_OPTIONS = (
    "-o",
    "BatchMode=yes",  # never a password prompt on the dashboard's terminal
    "-o",
    "ConnectTimeout=10",
    "-o",
    "ServerAliveInterval=5",  # a dead network is noticed in ~15 s, not at the next TCP timeout
    "-o",
    "ServerAliveCountMax=3",
)


def ssh_command() -> list[str]:
    """The ssh client and its own options: `$VTUI_SSH` (e.g. `ssh -F ~/.ssh/lab.conf`), else `ssh`."""
    return shlex.split(os.environ.get("VTUI_SSH") or "ssh")


def remote_vtui() -> str:
    """The vtui command on the other hosts (a shell word list: `~/venv/bin/vtui`, `python -m vtui`)."""
    return os.environ.get("VTUI_REMOTE_VTUI") or "vtui"


def host_label(target: str) -> str:
    """`user@gpu2.lab:22` -> `gpu2.lab`: what the fleet table's HOST column shows."""
    host = target.rsplit("@", 1)[-1]
    if host.startswith("["):  # [v6::addr]
        return host[1:].split("]", 1)[0]
    return host.split(":", 1)[0] if host.count(":") == 1 else host


def run_remote(target: str, words: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """`ssh TARGET REMOTE_VTUI WORDS` (blocking; for the CLI). Raises OSError when ssh cannot run."""
    return subprocess.run(
        [*ssh_command(), *SSH_OPTIONS, target, f"{remote_vtui()} {words}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
