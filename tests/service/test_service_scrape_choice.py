"""Which scrape loop the session supervisor runs for each instance (the dashboard runs none): a server's
own URL on the lean client, a router on its Prometheus port (`vllm_router_*`), an attached server with
an API key on httpx with the key, a sleeping server still (vLLM answers /metrics asleep), nothing for a
server that does not answer yet; a loop whose URL changes is replaced."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.service.broadcast import Broadcaster
from vtui.service.probes import LeanFetch, LeanLauncher
from vtui.service.scraping import Scrapers
from vtui.supervisor.replicas import supervised
from vtui.telemetry.scrape import HttpxFetch, ScrapeLoop

ENTRY = InstanceSpec("chat", "m", 8100, engine="sim", replicas=2, router_port=9000, gpus=(0, 1))
ATTACHED = InstanceSpec("ext", "m", 8000, engine="external", url="http://10.0.0.9:8000", api_key="k3y")
SOLO = InstanceSpec("solo", "m", 8200, engine="sim", gpus=(2,))


class _Supervisor:
    def __init__(self, specs: tuple[InstanceSpec, ...]) -> None:
        self.launcher = LeanLauncher()
        self.states = {s.name: State.READY for s in specs}
        self.specs = {s.name: s for s in specs}

    def status(self) -> tuple[InstanceStatus, ...]:
        return tuple(
            InstanceStatus(n, s, self.states[n], None, 1, 0.0, 0, None, None, False, None, None)
            for n, s in self.specs.items()
        )


def _scrapers(supervisor: _Supervisor) -> Scrapers:
    def spawn(coro: Any) -> asyncio.Task[Any]:
        coro.close()  # the loop is not run here: only which one, on which URL
        return asyncio.get_running_loop().create_future()  # type: ignore[return-value]

    return Scrapers(supervisor, Broadcaster(), spawn, print)  # type: ignore[arg-type]


async def test_one_scrape_loop_per_instance_on_the_url_of_its_state() -> None:
    layout = Layout(SessionSpec(name="s"), (ENTRY, SOLO, ATTACHED))
    sup = _Supervisor(supervised(layout, port_for_metrics=lambda: 9555).instances)
    sup.states["solo"] = State.STARTING
    scrapers = _scrapers(sup)
    scrapers.sync()
    assert all(type(loop) is ScrapeLoop for _, loop, _ in scrapers.loops.values())  # one loop class
    loops = {name: (url, type(loop.fetch)) for name, (url, loop, _) in scrapers.loops.items()}
    assert loops == {
        "chat-0": ("http://127.0.0.1:8100", LeanFetch),
        "chat-1": ("http://127.0.0.1:8101", LeanFetch),
        "chat-router": ("http://127.0.0.1:9555", LeanFetch),  # its Prometheus port, not a replica's
        "ext": ("http://10.0.0.9:8000", HttpxFetch),  # a key to send: httpx
    }
    assert scrapers.loops["ext"][1].api_key == "k3y"  # sent as a bearer (test_telemetry_scrape)
    first = scrapers.loops["chat-0"][1]
    sup.states["solo"] = State.READY
    sup.states["chat-0"] = State.ASLEEP  # a sleeping vLLM answers /metrics: scraped still
    scrapers.sync()
    assert scrapers.loops["chat-0"][1] is first and "solo" in scrapers.loops
    sup.states["chat-0"] = State.STOPPED
    sup.specs["chat-router"] = dataclasses.replace(
        sup.specs["chat-router"], flags={**sup.specs["chat-router"].flags, "prometheus-port": 9556}
    )
    scrapers.sync()
    assert "chat-0" not in scrapers.loops and first._stopped
    assert scrapers.loops["chat-router"][0] == "http://127.0.0.1:9556"  # a new URL: a new loop
    await sup.launcher.aclose()
