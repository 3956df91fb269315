"""An in-memory supervisor behind the UI's seam (`vtui.core.api.SupervisorApi`): instant starts,
scripted failures.

For Pilot tests, snapshots and the UI benchmark, where real processes would be slow and nondeterministic.
It emits the same frozen events as the real one, on the running event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from vtui.core.events import Event, LogLines, PhaseChanged, StateChanged, subscribe_to
from vtui.core.model import FlagValue, InstanceSpec, Layout
from vtui.core.pending import FlagConflict, PendingEdits
from vtui.core.refusals import PreflightError, RestartReverted
from vtui.core.state import Phase, State
from vtui.core.status import InstanceStatus

if TYPE_CHECKING:
    from vtui.core.api import SupervisorApi

RECENT_LINES = 200  # log lines kept per instance for recent_lines()
# A fallback's pause between the failed start and the way back: the real supervisor's takes seconds (a
# stop, a start), so a dashboard sees the failure; without it the two snapshots meet in one UI turn.
FALLBACK_PAUSE_S = 0.02
FailRule = Callable[[InstanceSpec], "list[str] | None"]  # log lines of a failed start, or None: it starts


class FakeSupervisor:
    def __init__(
        self,
        layout: Layout,
        *,
        fail: FailRule | None = None,
        clock: Callable[[], float] | None = None,
        auto_ready: bool = True,
        preflight: Callable[[Layout], list[str]] | None = None,
    ) -> None:
        self._layout = layout
        self._fail = fail
        self._clock = clock or (lambda: 1_700_000_000.0)
        self._auto_ready = auto_ready
        self._preflight = preflight
        self._subs: list[Callable[[Event], None]] = []
        self._status = {
            s.name: InstanceStatus(
                s.name, s, State.STOPPED, None, None, None, 0, None, None, False, None, None
            )
            for s in layout.instances
        }
        self._recent: dict[str, deque[str]] = {s.name: deque(maxlen=RECENT_LINES) for s in layout.instances}
        self.calls: list[tuple[object, ...]] = []
        self.restarts: list[tuple[str, str, bool]] = []  # each restart's (name, label, fallback)
        self.edits = PendingEdits()  # pending flag edits, as the session supervisor keeps them
        self.closed_with: bool | None = None

    # -- API ---------------------------------------------------------------------------------------
    @property
    def layout(self) -> Layout:
        return self._layout

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        return subscribe_to(self._subs, callback)

    def status(self) -> tuple[InstanceStatus, ...]:
        return tuple(self._status[s.name] for s in self._layout.instances)

    def pids_of(self, name: str) -> set[int]:
        pid = self._status[name].pid
        return {pid} if pid else set()

    def recent_lines(self, name: str) -> list[str]:
        return list(self._recent.get(name, ()))

    async def adopt(self) -> list[str]:
        return []

    async def start(self, names: Iterable[str] | None = None) -> None:
        names = list(names) if names is not None else self._layout.names()
        self.calls.append(("start", tuple(names)))
        if self._preflight and (problems := self._preflight(self._layout)):
            raise PreflightError(problems)
        for name in names:
            if self._status[name].spec.engine == "external":  # attached: watched, never launched
                if self._status[name].state is State.STOPPED:
                    self._set(name, State.READY, reason="answers /health")
            elif not self._status[name].state.running:
                await self._launch(name)

    async def wait_settled(
        self, names: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[str, State]:
        return {n: self._status[n].state for n in (names or self._layout.names())}

    async def stop(self, names: Iterable[str] | None = None) -> None:
        names = list(names) if names is not None else self._layout.names()
        self.calls.append(("stop", tuple(names)))
        for name in names:
            st = self._status[name]
            if st.spec.engine == "external":
                continue  # attached: left running, as the real supervisor does
            if st.state.running:
                self._set(name, State.STOPPING)
                self._set(name, State.STOPPED, pid=None, started_at=None)
            elif st.state in (State.CRASHED, State.BACKOFF, State.FAILED):
                self._set(name, State.STOPPED, pid=None, started_at=None)

    async def restart(
        self, name: str, spec: InstanceSpec | None = None, *, label: str = "restart", fallback: bool = False
    ) -> dict[str, FlagValue]:
        """As the supervisor restarts: new flags are checked (the `preflight` rule) before anything is
        stopped; with `fallback`, new flags that fail to start go back to the flags before
        (RestartReverted). `restarts` records each call's (name, label, fallback)."""
        self.calls.append(("restart", name, dict(spec.flags) if spec else None))
        self.restarts.append((name, label, fallback))
        before = self._status[name].spec
        changed = spec is not None and spec != before
        if spec is not None and changed and self._preflight:
            if problems := self._preflight(self._layout.replace_instance(spec)):
                raise PreflightError(problems)
        await self.stop([name])
        if spec is not None:
            self._apply(name, spec)
        await self._launch(name)
        if fallback and changed and self._status[name].state is State.FAILED:
            why = self._status[name].last_error or "it failed"
            await asyncio.sleep(FALLBACK_PAUSE_S)  # the failure is seen before the way back, as it is live
            self._apply(name, before)
            await self.stop([name])
            await self._launch(name)
            raise RestartReverted(
                f"{name}: the new flags did not reach READY ({why}); it went back to the flags before "
                f"and is {self._status[name].state.value} again",
                dict(before.flags),
            )
        return dict(self._status[name].spec.flags)

    def _apply(self, name: str, spec: InstanceSpec) -> None:
        self._layout = self._layout.replace_instance(spec)
        self._status[name] = replace(self._status[name], spec=spec)
        self.edits.rebase(name, spec.flags)  # a kept edit keeps its own changes only (core.pending)

    async def sleep(self, name: str, level: int = 1) -> None:
        self.calls.append(("sleep", name, level))
        if self._status[name].state is State.READY:
            self._set(name, State.ASLEEP, reason=f"sleep level {level}")

    async def wake(self, name: str) -> None:
        self.calls.append(("wake", name))
        if self._status[name].state is State.ASLEEP:
            self._set(name, State.WAKING)
            self._set(name, State.READY)

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def close(self, stop_instances: bool = False) -> None:
        self.closed_with = stop_instances
        if stop_instances:
            await self.stop()

    def pending_edits(self) -> dict[str, dict[str, FlagValue]]:
        return self.edits.snapshot()

    def pending_conflicts(self) -> dict[str, tuple[FlagConflict, ...]]:
        return self.edits.conflicts_snapshot()

    async def set_pending(
        self, name: str, flags: Mapping[str, FlagValue] | None, base: Mapping[str, FlagValue] | None = None
    ) -> None:
        self.calls.append(("set_pending", name, dict(flags) if flags is not None else None))
        applied = self._status[name].spec.flags
        self.edits.set(name, flags, base if base is not None else applied)
        if flags is not None:
            self.edits.rebase(name, applied)

    async def older_lines(self, name: str, anchor: list[str], count: int) -> list[str] | None:
        """`core.api.LogScrollback`, as the session supervisor answers `POST /logs`: read back from the
        file the instance's status names."""
        from vtui.supervisor.logfile import read_older

        path = self._status[name].log_path
        return await asyncio.to_thread(read_older, path, anchor, count) if path is not None else None

    # -- scripting (tests) -------------------------------------------------------------------------
    def crash(self, name: str, lines: list[str], *, final: bool = True) -> None:
        """Make a running instance die with these log lines (FAILED when final, else BACKOFF)."""
        from vtui.core.phases import root_cause

        self._emit(LogLines(name, tuple(lines)))
        self._set(name, State.CRASHED, reason=root_cause(lines), pid=None)
        self._set(name, State.FAILED if final else State.BACKOFF)

    def emit_logs(self, name: str, lines: Iterable[str]) -> None:
        self._emit(LogLines(name, tuple(lines)))

    def set_state(self, name: str, state: State, phase: Phase | None = None, **fields: Any) -> None:
        self._set(name, state, phase=phase, **fields)

    # -- internals ---------------------------------------------------------------------------------
    async def _launch(self, name: str) -> None:
        spec = self._layout.instance(name)
        pid = 40000 + self._layout.names().index(name)
        self._set(
            name, State.STARTING, phase=Phase.SPAWNED, pid=pid, started_at=self._clock(), last_error=None
        )
        self._emit(LogLines(name, (f"INFO vtui fake: starting {spec.model} on port {spec.port}",)))
        await asyncio.sleep(0)
        failure = self._fail(spec) if self._fail else None
        if failure:
            from vtui.core.phases import root_cause

            self._emit(LogLines(name, tuple(failure)))
            self._set(name, State.FAILED, reason=root_cause(failure), pid=None)
            return
        if self._auto_ready:
            self._emit(
                LogLines(
                    name,
                    (
                        f"INFO: GPU KV cache size: {spec.flags.get('max-model-len', 4096) * 8} tokens",
                        "INFO: Starting vLLM API server on http://127.0.0.1",
                    ),
                )
            )
            self._set(name, State.READY, last_good_spec=spec)

    def _set(
        self,
        name: str,
        state: State,
        *,
        phase: Phase | None = None,
        reason: str | None = None,
        **fields: Any,
    ) -> None:
        old = self._status[name]
        if reason is not None:
            fields["last_error"] = reason
        if state == State.STARTING and old.state in (State.CRASHED, State.BACKOFF, State.FAILED):
            fields.setdefault("restarts", old.restarts + 1)
        new = replace(old, state=state, phase=phase if state == State.STARTING else None, **fields)
        self._status[name] = new
        if old.state != state:
            self._emit(StateChanged(name, old.state, state, self._clock(), phase, reason))
        elif phase is not None and phase != old.phase:
            self._emit(PhaseChanged(name, phase, self._clock()))

    def _emit(self, event: Event) -> None:
        if isinstance(event, LogLines) and event.instance in self._recent:
            self._recent[event.instance].extend(event.lines)
        for cb in list(self._subs):
            cb(event)


if TYPE_CHECKING:  # mypy checks the fake against the seam the UI is typed on

    def _satisfies(fake: FakeSupervisor) -> SupervisorApi:
        return fake
