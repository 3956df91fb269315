"""Stop and restart: replicas before their routers, a pending launch or watchdog restart settled first,
the drain (`supervisor.drain`) through the launcher's stop; a watchdog's restart without the drain."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

from vtui.core.instance import Instance
from vtui.core.model import InstanceSpec
from vtui.core.refusals import attached_refusal
from vtui.supervisor.attached import Attached, AttachedRefused
from vtui.supervisor.supervisor_base import SupervisorBase


class StopMixin(SupervisorBase):
    async def stop(self, names: Iterable[str] | None = None, grace: float | None = None) -> None:
        """Stop each instance: SIGTERM, grace, SIGKILL of the group, sweep; STOPPED once nothing is left.
        `grace`: seconds between SIGTERM and SIGKILL for this stop (default: `stop_grace`)."""
        if not self._adopted_once:
            await self.adopt()
        wanted = self._names(names)
        routers = [n for n in wanted if self.instances[n].spec.engine == "router"]
        # replicas drain first (their router stops sending them requests), their routers after them
        await asyncio.gather(*(self._stop_one(n, grace) for n in wanted if n not in routers))
        await asyncio.gather(*(self._stop_one(n, grace) for n in routers))

    async def _stop_one(self, name: str, grace: float | None = None) -> None:
        inst = self.instances[name]
        if isinstance(inst, Attached):
            self._notice(name, "info", f"{name}: {left_running(inst.spec)}")
            return
        for tasks in (self._policy_stops, self._sleeps):
            task = tasks.pop(name, None)
            if task is not None:  # a watchdog restart or an idle sleep under way finishes first
                with contextlib.suppress(Exception):
                    await task
        pending = self._pending.pop(name, None)
        if pending is not None:
            pending.cancel()  # a spawn under way finishes first and attaches its process: stopped below
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        await self._sweeper.settle(name)
        handle = inst.begin_stop()
        if handle is None:
            inst.finish_stop()  # STOPPING with no process (nothing was spawned): STOPPED
            self.store.remove(self.session, name)
            return
        handle.serves(inst.spec)  # where the stop asks how many requests are in flight (supervisor.drain)
        report = await asyncio.to_thread(
            self.launcher.stop, handle, self.stop_grace if grace is None else grace
        )
        self._drain(name)
        if report.cut_text():
            self._notice(name, "warning", f"{name}: {report.cut_text()}")
        if not report.graceful:
            self._notice(name, "warning", f"{name} did not stop on SIGTERM: killed {list(report.killed)}")
        if report.leftovers:
            self._notice(
                name, "error", f"{name}: processes still alive after SIGKILL: {list(report.leftovers)}"
            )
        inst.finish_stop()
        self.store.remove(self.session, name)

    async def restart(self, name: str, spec: InstanceSpec | None = None) -> None:
        """Stop, then start again — with `spec` (new flags) when given. The spec that last reached
        READY stays in `last_good_spec` for a rollback. AttachedRefused for an attached server."""
        if isinstance(self.instances.get(name), Attached):
            raise AttachedRefused(attached_refusal(self.instances[name].spec, "restart"))
        await self.stop([name])
        inst = self.instances[name]
        if spec is not None:
            self._restored_layout.pop(name, None)  # these flags, not the layout's, start next
            inst.spec = spec
            self._set_layout_spec(spec)
            self._rebase_edits(name)  # another client's kept edit keeps only its own changes on these
        inst.attempt = 0
        await self.start([name])

    async def _policy_stop(self, name: str, inst: Instance, handle: Any) -> None:
        """A watchdog's restart: the normal stop (SIGTERM, grace, SIGKILL of the group, sweep), then
        `finish_stop` makes the run a failure (CRASHED, then BACKOFF or FAILED by the restart policy)."""
        try:  # no drain: a hung or stuck server finishes nothing (handle.serves is not called)
            report = await asyncio.to_thread(self.launcher.stop, handle, self.stop_grace)
            self._drain(name)
            if not report.graceful:
                self._notice(name, "warning", f"{name} did not stop on SIGTERM: killed {list(report.killed)}")
        finally:
            inst.finish_stop()
            self._policy_stops.pop(name, None)


def left_running(spec: InstanceSpec) -> str:
    """What a stop says of an attached server."""
    return f'attached server (engine = "external", {spec.base_url}) left running: vtui never stops it'
