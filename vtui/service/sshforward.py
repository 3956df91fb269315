"""The ssh transport of `vtui --host`: one OpenSSH forward of a remote session's Unix socket to a local
one (`ssh -N -o ExitOnForwardFailure=yes -L LOCAL.sock:REMOTE.sock HOST`, the local socket 0600 in the
0700 state dir) with a `RemoteSupervisor` on its local end (`Forward`), kept up with backoff (0.5 s
doubling to 30 s; from the start again after a forward that lived `STABLE_S`); the ssh children die
with the dashboard (`die_with_parent`: Linux's PR_SET_PDEATHSIG). Nothing here blocks the caller: every
ssh runs as an asyncio subprocess, every wait is on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import sys
import time
from collections import deque
from typing import Any, Protocol

from vtui.core import paths
from vtui.core.model import Layout, SessionSpec
from vtui.service import locations
from vtui.service.remote import RemoteSupervisor
from vtui.service.ssh import SSH_OPTIONS, ssh_command


class Link(Protocol):
    """What a forward needs of the host link that owns it (`service.hosts.HostLink`): the ssh target,
    the label its instances are shown under, and a call when its state changes. A Protocol, so this
    module does not import the link's."""

    @property
    def target(self) -> str: ...

    @property
    def label(self) -> str: ...

    def changed(self) -> None: ...


__all__ = ["Backoff", "Forward", "Link", "LinkError", "die_with_parent", "reaped"]

FORWARD_TIMEOUT = 15.0  # seconds for a forward's local socket to answer
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 30.0
STABLE_S = 10.0  # a forward that lived this long was a good one: the backoff starts over


def _find_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl  # looked up here, never in a forked child
    except (OSError, AttributeError):
        return None


_PRCTL = _find_prctl()


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the dashboard dies, even by kill -9 (Linux's
    PR_SET_PDEATHSIG; elsewhere `drop_links` on the way out is all there is). Only a call through a
    function pointer resolved in the parent: nothing that could wait on a lock another thread held."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


async def reaped(proc: asyncio.subprocess.Process, within: float = 2.0) -> None:
    """Read a killed child's pipes to their end and reap it, through the second cancellation a closing
    link sends (drop, then close): else its pipes' transports outlive the event loop. Bounded: a killed
    process ends at once."""
    end = time.monotonic() + within
    done = asyncio.ensure_future(proc.communicate())
    while not done.done() and time.monotonic() < end:
        try:
            await asyncio.wait_for(asyncio.shield(done), max(0.01, end - time.monotonic()))
        except asyncio.CancelledError:
            continue
        except Exception:  # noqa: BLE001 — a timeout, or pipes that cannot be read: give up
            break
    if not done.done():
        done.cancel()


class LinkError(Exception):
    """ssh failed: its last line of stderr, or what did not answer."""


class Backoff:
    def __init__(self, first: float | None = None, cap: float | None = None) -> None:
        self.first = BACKOFF_FIRST if first is None else first
        self.cap = BACKOFF_MAX if cap is None else cap
        self.delay = self.first

    def reset(self) -> None:
        self.delay = self.first

    async def sleep(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.cap, self.delay * 2)


class Forward:
    """One remote session reached through one ssh forward, and its supervisor client."""

    def __init__(self, link: Link, info: dict[str, Any], qualified: bool = False) -> None:
        self.link = link
        self.qualified = qualified  # its instances are LABEL:SESSION/NAME (chosen once: names stay)
        self.session = str(info["session"])
        self.remote_socket = str(info["socket"])
        digest = hashlib.sha256(f"{link.target}\0{self.remote_socket}".encode()).hexdigest()[:16]
        folder = paths.state_dir() / "hosts"
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        # a Unix socket path has at most 107 bytes: a deep state dir's forwards go to a short folder (was: ssh
        # refused the forward and the dashboard waited for the host with no word)
        self.local_socket = locations.short_socket(folder / f"{digest}.sock")
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Future[None] | None = None  # reads ssh's stderr to its end
        self.stderr: deque[str] = deque(maxlen=5)
        self.why: str | None = "connecting"
        self.client = RemoteSupervisor(
            Layout(SessionSpec(name=self.session), ()),
            socket_file=self.local_socket,
            start_on_demand=False,
            reconnect_delay=0.25,
            max_reconnect_delay=2.0,
            on_connection=self._on_connection,
            host=link.target,
        )

    @property
    def connected(self) -> bool:
        return self.client.connected and self.proc is not None and self.proc.returncode is None

    def _on_connection(self, connected: bool, why: str | None) -> None:
        if not connected and self.proc is not None and self.proc.returncode is None:
            self.why = why  # (when ssh is gone, what ssh said is the better why)
        self.link.changed()

    async def keep(self) -> None:
        """Keep the forward up until cancelled: start it, wait for it to die, start it again."""
        backoff = Backoff()
        self.client.begin()
        while True:
            started = time.monotonic()
            try:
                await self._start()
                assert self.proc is not None
                await self.proc.wait()
                self.why = self._ssh_said(f"ssh exited ({self.proc.returncode})")
            except LinkError as exc:
                self.why = str(exc)
            await self._end()
            self.link.changed()
            if time.monotonic() - started >= STABLE_S:
                backoff.reset()
            await backoff.sleep()

    async def _start(self) -> None:
        self.local_socket.unlink(missing_ok=True)
        self.stderr.clear()
        self.proc = await asyncio.create_subprocess_exec(
            *ssh_command(),
            *SSH_OPTIONS,
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-o",
            "StreamLocalBindUnlink=yes",
            "-L",
            f"{self.local_socket}:{self.remote_socket}",
            self.link.target,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            preexec_fn=die_with_parent,  # a killed dashboard leaves no `ssh -N` behind
        )
        self._reader = asyncio.ensure_future(self._read_stderr(self.proc))
        deadline = time.monotonic() + FORWARD_TIMEOUT
        while not self.local_socket.exists():
            if self.proc.returncode is not None:
                await self.proc.wait()
                raise LinkError(self._ssh_said(f"ssh exited ({self.proc.returncode})"))
            if time.monotonic() > deadline:
                raise LinkError(f"the forward of {self.session}'s socket did not come up")
            await asyncio.sleep(0.05)
        with contextlib.suppress(OSError):
            os.chmod(self.local_socket, 0o600)

    async def _read_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        with contextlib.suppress(Exception):
            async for raw in proc.stderr:
                line = raw.decode(errors="replace").strip()
                if line:
                    self.stderr.append(line)

    def _ssh_said(self, default: str) -> str:
        return self.stderr[-1] if self.stderr else default

    async def _end(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 3.0)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        reader, self._reader = self._reader, None
        if reader is not None:  # its stderr read to the end: the pipe closed before the loop is
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(reader), 1.0)
        self.local_socket.unlink(missing_ok=True)

    async def close(self) -> None:
        await self.client.close()
        await self._end()

    def drop(self) -> None:
        """End ssh now, without waiting (the app is going away)."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
