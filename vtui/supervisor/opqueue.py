"""One operation at a time per instance, modelled on systemd's jobs.

An instance has at most one running operation and at most one waiting. A new request is joined to one
of them, queued, or refused by the fixed table below, never by timing:

| request | running or waiting                  | answer                                                |
|---------|-------------------------------------|-------------------------------------------------------|
| any     | nothing                             | runs now                                              |
| stop    | a stop of the same origin           | joins it (a user's stop waits behind a watchdog's)    |
| stop    | a waiting start/restart/sleep/wake  | that one is superseded (its callers: `OperationSuperseded`); the stop waits |
| stop    | a running operation                 | waits; a launch still pending is cancelled (`preempt`)|
| other   | a user's stop running, a stop waiting | refused (`OperationConflict`, 409)                  |
| start   | a start or restart                  | joins it (one start)                                  |
| restart | a waiting restart                   | merged: one restart, the changes applied in order, newest last |
| restart | a waiting start                     | the start becomes this restart (its callers get the restart's outcome) |
| sleep/wake | the same, running or waiting     | joins it                                              |
| any     | a different kind waiting            | refused (`OperationConflict`, 409)                    |
| any     | otherwise                           | waits, then runs                                      |
| policy  | anything                            | refused: a policy (restart on crash, watchdog, idle sleep) acts only on an idle instance |

Every caller of an operation gets its outcome (its result or its exception). The operation runs in a
task of the queue's own, so a caller that goes away (a client disconnecting) does not cancel it for
the others. `on_change` is called whenever what runs or waits changes (the supervisor emits an
`OperationChanged` event, so `ps` and the dashboard show "restart (1 waiting)").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from vtui.core.model import InstanceSpec
from vtui.core.refusals import OperationConflict, OperationSuperseded

Kind = Literal["start", "stop", "restart", "sleep", "wake"]
Origin = Literal["user", "policy"]
Change = Callable[[InstanceSpec], InstanceSpec]
Runner = Callable[["Operation"], Awaitable[Any]]

__all__ = ["Operation", "OperationQueue"]


def _then(first: Change | None, second: Change | None) -> Change | None:
    if first is None:
        return second
    if second is None:
        return first
    return lambda spec: second(first(spec))


@dataclass(eq=False)
class Operation:
    """One operation of one instance, and everything its callers wait on."""

    kind: Kind
    label: str  # what `ps` shows: "restart", "fix", "rollback", "tune trial", "policy restart"…
    origin: Origin
    run: Runner
    change: Change | None = None  # a restart's flags: applied to the spec it finds when it runs
    callers: int = 1
    future: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    task: asyncio.Task[Any] | None = None

    def describe(self) -> str:
        return self.label if self.callers == 1 else f"{self.label} (×{self.callers})"


class OperationQueue:
    def __init__(
        self,
        name: str,
        *,
        on_change: Callable[[], None] = lambda: None,
        preempt: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = name
        self.running: Operation | None = None
        self.waiting: Operation | None = None
        self._on_change = on_change
        self._preempt = preempt  # a stop was queued: cut a running launch short (its pending spawn)

    @property
    def idle(self) -> bool:
        return self.running is None and self.waiting is None

    @property
    def stop_waiting(self) -> bool:
        """A stop waits behind the running operation: it must not launch anything more."""
        return self.waiting is not None and self.waiting.kind == "stop"

    @property
    def stopping(self) -> bool:
        """A stop runs or waits."""
        return any(op is not None and op.kind == "stop" for op in (self.running, self.waiting))

    def snapshot(self) -> tuple[str | None, str | None]:
        """(running, waiting) labels, for status snapshots."""
        return (
            self.running.label if self.running else None,
            self.waiting.label if self.waiting else None,
        )

    def submit(
        self,
        kind: Kind,
        run: Runner,
        *,
        label: str | None = None,
        origin: Origin = "user",
        change: Change | None = None,
    ) -> Operation:
        """Place a request (synchronously: no other request comes between the check and the claim).
        Returns the operation that serves it; await `asyncio.shield(op.future)` for its outcome."""
        label = label or kind
        if origin == "policy" and not self.idle:
            raise OperationConflict(f"{self.name}: {self._busy()}: {label} not started")
        new = Operation(kind, label, origin, run, change)
        running, waiting = self.running, self.waiting
        if running is None:
            self._begin(new)
            return new
        if kind == "stop":
            if running.kind == "stop" and running.origin == origin:
                return self._join(running)
            if waiting is not None and waiting.kind == "stop":
                return self._join(waiting)
            if waiting is not None:
                self.waiting = None
                waiting.future.set_exception(
                    OperationSuperseded(f"{self.name}: {waiting.label} did not run: a stop came first")
                )
                waiting.future.exception()  # retrieved here: a caller that went away leaves no warning
            self.waiting = new
            self._changed()
            self._preempt()
            return new
        if (running.kind == "stop" and running.origin == "user") or (
            waiting is not None and waiting.kind == "stop"
        ):
            raise OperationConflict(f"{self.name} is being stopped: {label} refused (start it once stopped)")
        if kind == "start" and waiting is None and running.kind in ("start", "restart"):
            return self._join(running)
        if waiting is None:
            self.waiting = new
            self._changed()
            return new
        if kind == waiting.kind and kind != "restart":
            return self._join(waiting)
        if kind == "start" and waiting.kind == "restart":
            return self._join(waiting)
        if kind == "restart" and waiting.kind in ("restart", "start"):
            waiting.kind = "restart"
            waiting.run = run
            waiting.change = _then(waiting.change, change)
            if waiting.label == "start":
                waiting.label = label
            self._join(waiting)
            return waiting
        raise OperationConflict(f"{self.name}: {self._busy()}: {label} refused (try again after them)")

    def _busy(self) -> str:
        parts = [f"{self.running.label} running"] if self.running else []
        if self.waiting:
            parts.append(f"{self.waiting.label} waiting")
        return ", ".join(parts) or "idle"

    def _join(self, op: Operation) -> Operation:
        op.callers += 1
        self._changed()
        return op

    def _begin(self, op: Operation) -> None:
        self.running = op
        op.task = asyncio.create_task(self._execute(op), name=f"vtui-op-{self.name}-{op.kind}")
        self._changed()

    async def _execute(self, op: Operation) -> None:
        try:
            result = await op.run(op)
        except asyncio.CancelledError:
            if not op.future.done():
                op.future.cancel()
            raise
        except BaseException as exc:  # noqa: BLE001 — handed to every caller of the operation
            if not op.future.done():
                op.future.set_exception(exc)
                op.future.exception()  # retrieved: no "never retrieved" warning if every caller left
        else:
            if not op.future.done():
                op.future.set_result(result)
        finally:
            if self.running is op:
                self.running = None
                nxt, self.waiting = self.waiting, None
                if nxt is not None:
                    self._begin(nxt)
                else:
                    self._changed()

    def _changed(self) -> None:
        with contextlib.suppress(Exception):
            self._on_change()

    async def close(self) -> None:
        """Cancel what waits and what runs (the supervisor closes)."""
        waiting, self.waiting = self.waiting, None
        if waiting is not None and not waiting.future.done():
            waiting.future.cancel()
        running = self.running
        if running is not None and running.task is not None:
            running.task.cancel()
            with contextlib.suppress(BaseException):
                await running.task
