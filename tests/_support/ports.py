"""Ports for real vLLM servers in tests."""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path


def _ephemeral_low() -> int:
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return low


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def vllm_ports(count: int) -> list[int]:
    """Free ports below the kernel's ephemeral range (32768+ on Linux). vLLM binds its port only once
    its engine is up, a minute after the launch: a port the kernel handed out for `bind(0)` could go in
    that minute to the other xdist worker's tests (every `free_port()` there is a `bind(0)`), and vLLM
    would fail on "Address already in use": the suspected cause of relaunches seen in the story under
    xdist. Below the range no `bind(0)` lands."""
    low = _ephemeral_low()
    ports: list[int] = []
    for port in random.sample(range(max(1024, low - 12000), low), 200):
        if not _free(port):
            continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise RuntimeError("no free ports below the ephemeral range")


def port_run(count: int) -> int:
    """The first of `count` consecutive free ports below the ephemeral range (a replica group's ports:
    `port`, `port + 1`, ...). From `bind(0)` the run's second port would be of the parity Linux gives
    every outgoing connection's local port (bind(0) hands out odd ports, connect() even ones): any
    connection on the machine could hold it before the replica binds it."""
    low = _ephemeral_low()
    for base in random.sample(range(max(1024, low - 12000), low - count), 200):
        if all(_free(base + i) for i in range(count)):
            return base
    raise RuntimeError("no consecutive free ports below the ephemeral range")
