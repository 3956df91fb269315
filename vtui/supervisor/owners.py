"""Which instance a GPU-holding process belongs to, without walking the process table.

Every process of a launched instance runs in the session its log pump leads (the launcher starts the
pump with its own session), and keeps it when its parent dies (an EngineCore orphaned by a killed API
server too). So one `getsid` per pid names its instance: `sessions()` maps each running instance's
session id to its name. The GPU sampler asks only about the pids the GPUs list, each tick, instead of
every instance's process tree (a `/proc` walk per instance per second before: benchmarks/
bench_supervisor_cost.py). A pid of no session of ours is read once for its `VTUI_INSTANCE` marker, or
its session leader's (vLLM's process titles wipe the environ of EngineCore and Workers): another vtui
session's instance is named "SESSION/NAME", not "not a vtui instance".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping

MARKER = "VTUI_INSTANCE"  # = supervisor.launcher.MARKER (kept here: the launcher imports psutil at once)


def _environ_marker(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    for entry in data.split(b"\0"):
        if entry.startswith(MARKER.encode() + b"="):
            return entry[len(MARKER) + 1 :].decode(errors="replace") or None
    return None


class ProcessOwners:
    """`owners(pids)` -> {pid: instance name} for the pids it can name. `sessions()`: session id -> name of
    this supervisor's running instances; `extra()`: pid -> name known otherwise (attached servers' local
    listeners); `session`: this supervisor's session name (a marker of it names no other session)."""

    def __init__(
        self,
        sessions: Callable[[], Mapping[int, str]],
        *,
        session: str | None = None,
        extra: Callable[[], Mapping[int, str]] | None = None,
        getsid: Callable[[int], int] = os.getsid,
        marker: Callable[[int], str | None] = _environ_marker,
    ) -> None:
        self._sessions = sessions
        self._session = session
        self._extra = extra
        self._getsid = getsid
        self._marker = marker
        self._others: dict[tuple[int, int], str | None] = {}  # (pid, sid) -> another session's "S/NAME"

    def __call__(self, pids: Collection[int]) -> dict[int, str]:
        sessions = self._sessions()
        extra = self._extra() if self._extra is not None else {}
        owners: dict[int, str] = {}
        seen: dict[tuple[int, int], str | None] = {}
        for pid in pids:
            if pid in extra:
                owners[pid] = extra[pid]
                continue
            try:
                sid = self._getsid(pid)
            except OSError:  # gone, or not ours to ask
                continue
            name = sessions.get(sid)
            if name is not None:
                owners[pid] = name
                continue
            key = (pid, sid)
            if key in self._others:
                other = self._others[key]
            else:
                other = self._other_session(pid, sid)
            seen[key] = other
            if other is not None:
                owners[pid] = other
        self._others = seen  # pids gone from the GPUs are forgotten
        return owners

    def _other_session(self, pid: int, sid: int) -> str | None:
        marker = self._marker(pid) or (self._marker(sid) if sid > 0 else None)
        if not marker or "/" not in marker:
            return None
        session, _, name = marker.partition("/")
        return name if session == self._session else marker  # ours: a leftover of that instance
