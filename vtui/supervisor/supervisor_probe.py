"""The supervisor's probes: /health of each launched instance while it starts or serves (its state
follows: STARTING -> READY, READY <-> UNHEALTHY), and of each attached server (`Attached.on_probe`), in
loops of their own on the health interval's grid."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from vtui.core.clock import Clock
from vtui.core.state import State
from vtui.supervisor.attached import Attached, Probe
from vtui.supervisor.health import HealthProbe
from vtui.supervisor.launcher import Launcher
from vtui.supervisor.logtails import LogTails
from vtui.supervisor.roster import Roster

__all__ = ["Prober", "to_grid"]

PROBED = (State.STARTING, State.READY, State.UNHEALTHY)


def to_grid(clock: Clock, interval: float) -> float:
    """Seconds to the next multiple of `interval` on the clock, at least half of it away: the health
    probes fall on the whole seconds, as the scrape loops do (`telemetry.scrape._Beat`),
    so an instance's /health and /metrics requests, their answers and their access-log lines come
    in the same wake-ups of the supervisor instead of two apart."""
    delay = interval - clock.time() % interval
    return delay + interval if delay < interval / 2 else delay


class Prober:
    def __init__(
        self,
        roster: Roster,
        launcher: Launcher,
        clock: Clock,
        tails: LogTails,
        notice: Callable[[str | None, str, str], None],
        *,
        interval: float,
    ) -> None:
        self._roster = roster
        self._launcher = launcher
        self._clock = clock
        self._tails = tails
        self._notice = notice
        self.interval = interval
        # the one /health probe: the launcher's (the lean client in the session supervisor), else one of
        # its own for a launcher double that has none; launched instances go through `launcher.health`
        own = getattr(launcher, "health_probe", None)
        self.health: HealthProbe = own if isinstance(own, HealthProbe) else HealthProbe()
        self._owns_health = self.health is not own

    async def health_loop(self) -> None:
        while True:
            await self.probe_launched()
            await self._clock.sleep(to_grid(self._clock, self.interval))

    async def probe_launched(self) -> None:
        """One /health probe of each launched instance that starts or serves, at once."""
        probing = [i for i in self._roster.instances.values() if i.handle is not None and i.state in PROBED]
        if not probing:
            return
        results = await asyncio.gather(
            *(self._launcher.health(i.spec) for i in probing), return_exceptions=True
        )
        for inst, ok in zip(probing, results, strict=True):
            if inst.handle is not None and inst.state in PROBED:
                if ok is True and inst.state is State.STARTING:
                    self._tails.drain(inst.spec.name)  # the startup phases logged so far come first
                inst.on_health(ok is True)

    async def attached_loop(self) -> None:
        while True:
            try:
                await self.probe_attached(
                    [i for i in self._roster.instances.values() if isinstance(i, Attached)]
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 — keep watching; say what went wrong
                self._notice(None, "error", f"attached servers' probe failed: {exc!r}")
            await self._clock.sleep(to_grid(self._clock, self.interval))  # in the health probes' wake-up

    async def probe_attached(self, attached: list[Attached]) -> None:
        """One /health probe of each attached server, at once; its state follows (`Attached.on_probe`)."""
        if not attached:
            return
        results = await asyncio.gather(*(self.health.probe(i.spec) for i in attached), return_exceptions=True)
        for inst, result in zip(attached, results, strict=True):
            if self._roster.instances.get(inst.spec.name) is not inst:
                continue  # dropped or replaced by a new layout meanwhile
            if isinstance(result, BaseException):
                result = Probe(None, f"probe failed: {result!r}")
            inst.on_probe(result)

    async def aclose(self) -> None:
        if self._owns_health:  # else the launcher's to close
            with contextlib.suppress(Exception):
                await self.health.aclose()
