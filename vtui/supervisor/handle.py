"""`ProcessHandle`: a launched instance's process tree as the launcher knows it (the leader, how to
recognise it again, its log pump), in a module of its own so that what only names it (the instance
state machines, the attached servers) does not import the launcher."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from vtui.core.model import InstanceSpec

__all__ = ["ProcessHandle"]


@dataclass
class ProcessHandle:
    """A running (or once running) instance: the API server pid and how to recognise its tree."""

    pid: int  # the leader: the `vllm serve` API server
    create_time: float  # psutil create time of `pid`; a recycled pid has another one
    pgid: int
    sid: int
    key: str  # "<session>/<name>", the MARKER value
    log_path: Path
    argv: tuple[str, ...]
    pump_pid: int | None = None
    exit_path: Path | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)  # the pump, when we spawned it
    base_url: str | None = None  # where to ask how many requests are in flight before stopping it
    load_endpoint: bool = False  # its /load counts requests in flight (see supervisor.drain)

    def serves(self, spec: InstanceSpec) -> None:
        """Set what the drain before a stop asks (an adopted handle learns it from the layout's spec).
        A router is not drained: its replicas are (their requests are the ones in flight)."""
        if spec.engine == "router":
            self.base_url = None
            return
        self.base_url = spec.base_url
        self.load_endpoint = spec.engine == "sim" or spec.flags.get("enable-server-load-tracking") is True
