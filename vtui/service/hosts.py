"""Several hosts, one dashboard: `vtui --host user@gpu2` attaches to the session supervisors of other
machines over SSH, with no new open port and no new credentials.

For each host, `HostLink` runs `ssh HOST vtui sessions --json` (the remote supervisors and their
sockets), then per remote session one ssh forward of the remote socket and a `RemoteSupervisor` on its
local end (`vtui.service.sshforward.Forward`: the same client, feed and requests as for this machine's
supervisor). A forward that dies (network, sshd, a suspended laptop) marks the host disconnected and is
started again with backoff; the feed re-attaches by itself once the socket answers again. The host's
sessions are looked for again and again (1 s doubling to 60 s, from 1 s again after a new one): a
session started there after the dashboard attached gets its forward and its rows. `vtui.service.multihost
.Fleet` puts this machine's session and the links behind one `SupervisorApi`.

The ssh command is `$VTUI_SSH` (split like a shell line; default `ssh`) and the remote vtui is
`$VTUI_REMOTE_VTUI` (default `vtui`): tests run both on this machine through `vtui.testing.fake_ssh`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

from vtui.core.status import HostState
from vtui.service.ssh import SSH_OPTIONS, host_label, remote_vtui, ssh_command
from vtui.service.sshforward import Backoff, Forward, LinkError, die_with_parent, reaped

__all__ = ["HostLink"]

DISCOVER_TIMEOUT = 20.0  # seconds for `ssh HOST vtui sessions --json`
REDISCOVER_FIRST, REDISCOVER_MAX = 1.0, 60.0  # `vtui sessions --json` again: sessions started later


class HostLink:
    """One `--host` target: its sessions found over ssh, each one's socket forwarded and followed."""

    def __init__(self, target: str, *, label: str | None = None) -> None:
        self.target = target
        self.label = label or host_label(target)
        self.forwards: list[Forward] = []
        self._state = HostState(self.label, target, "connecting", since=time.time())
        self._listeners: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._detail: str | None = None
        self._found = False

    @property
    def state(self) -> HostState:
        return self._state

    def relabel(self, label: str) -> None:
        """Shown as `label` from now on (two targets with one label: the fleet shows their targets)."""
        self.label = label
        self._state = dataclasses.replace(self._state, label=label)

    def listen(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        """Find the host's sessions, then look again with backoff (from the start again after a new
        one) for sessions started there since: each new one gets its forward. A failed look while
        forwards run changes nothing (each forward reports its own link)."""
        backoff = Backoff()
        again = Backoff(REDISCOVER_FIRST, REDISCOVER_MAX)
        while True:
            try:
                found = await self._discover()
            except LinkError as exc:
                if not self.forwards:
                    self._detail = str(exc)
                    self.changed()
                    await backoff.sleep()
                else:
                    await again.sleep()
                continue
            if not found and not self.forwards:
                self._found, self._detail = True, "no session supervisor runs there"
                self.changed()
                await backoff.sleep()
                continue
            self._found, self._detail = True, None
            if self._add(found):
                again.reset()
            await again.sleep()

    def _add(self, found: list[dict[str, Any]]) -> bool:
        """Forwards for the sessions not followed yet (by remote socket); True when there were any."""
        known = {fwd.remote_socket for fwd in self.forwards}
        new = [info for info in found if str(info["socket"]) not in known]
        if not new:
            return False
        qualified = bool(self.forwards) or len(found) > 1
        added = [Forward(self, info, qualified) for info in new]
        self.forwards = [*self.forwards, *added]
        for fwd in added:
            fwd.client.subscribe_statuses(self.changed)
        self.changed()
        self._tasks += [asyncio.ensure_future(fwd.keep()) for fwd in added]
        return True

    async def _discover(self) -> list[dict[str, Any]]:
        """The remote supervisors (`vtui sessions --json` run over ssh)."""
        command = f"{remote_vtui()} sessions --json"
        try:
            proc = await asyncio.create_subprocess_exec(
                *ssh_command(),
                *SSH_OPTIONS,
                self.target,
                command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                preexec_fn=die_with_parent,
            )
        except OSError as exc:
            raise LinkError(f"cannot run {ssh_command()[0]}: {exc.strerror or exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), DISCOVER_TIMEOUT)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise LinkError(f"`{command}` did not answer within {DISCOVER_TIMEOUT:g} s") from None
        except asyncio.CancelledError:  # the link closes while it looks: no ssh left behind
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await reaped(proc)
            raise
        if proc.returncode != 0:
            lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
            raise LinkError(lines[-1] if lines else f"`{command}` exited {proc.returncode}")
        try:
            data = json.loads(out)
        except ValueError:
            raise LinkError(f"`{command}` printed no JSON (is vtui there? $VTUI_REMOTE_VTUI)") from None
        if not isinstance(data, list):
            raise LinkError(f"`{command}` printed no list")
        return [d for d in data if isinstance(d, dict) and d.get("session") and d.get("socket")]

    def changed(self) -> None:
        if not self.forwards:
            state = "no session" if self._found and self._detail else "connecting"
            if not self._found and self._detail:
                state = "disconnected"
            new = HostState(self.label, self.target, state, self._detail, since=time.time())
        else:
            lost = [f for f in self.forwards if not f.connected]
            state = "connected" if not lost else "disconnected"
            detail = None if not lost else f"{lost[0].session}: {lost[0].why or 'connecting'}"
            sessions = tuple(f.session for f in self.forwards)
            new = HostState(self.label, self.target, state, detail, sessions, time.time())
        old = self._state
        if (old.state, old.detail, old.sessions) != (new.state, new.detail, new.sessions):
            self._state = new
        for listener in list(self._listeners):
            listener()

    async def close(self) -> None:
        for task in [*self._tasks, *([self._task] if self._task else [])]:
            task.cancel()
        for task in [*self._tasks, *([self._task] if self._task else [])]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for fwd in self.forwards:
            await fwd.close()

    def drop(self) -> None:
        for task in [*self._tasks, *([self._task] if self._task else [])]:
            task.cancel()
        for fwd in self.forwards:
            fwd.drop()
