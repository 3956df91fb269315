"""The session service's scrape scheduler: one scrape loop per instance that serves (the lean one, or
httpx for https and keys), on the URL its state says (`supervisor.replicas.scrape_url`), and the
samples' bounded history; each sample feeds the supervisor's load watch and goes on the feed."""

from __future__ import annotations

import asyncio
import dataclasses
import operator
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from vtui.service.broadcast import Broadcaster
from vtui.service.probes import LeanFetch, LeanLauncher
from vtui.service.wire import dumps, encode_sample, feed_line
from vtui.supervisor.replicas import scrape_url
from vtui.supervisor.supervisor import Supervisor
from vtui.telemetry.metrics import MetricsSample
from vtui.telemetry.scrape import ScrapeLoop

SAMPLE_HISTORY = 3600  # one hour of 1 Hz samples per instance


_AT = "\x00at\x00"  # stands for the time in a sample's feed line (JSON writes it "\u0000at\u0000")
_AT_JSON = dumps(_AT)


def _line_template(message: dict[str, Any]) -> tuple[bytes, bytes]:
    """The feed line of `message` (as `Broadcaster.broadcast` writes it) cut around its `_AT` value: a
    restamped sample's line is the two halves around its time, not a JSON encoding of the whole sample
    again."""
    head, _, tail = feed_line(message).partition(_AT_JSON)
    return head, tail


def _restamped(sample: Any, last: Any) -> bool:
    """`sample` is `last` at another time: every other field the very same object (as MetricsWindow's
    restamp of a steady sample leaves them; a computed sample has new ones)."""
    if type(sample) is not type(last) or not isinstance(sample, MetricsSample):
        return False
    return all(map(operator.is_, _restamp_fields(sample), _restamp_fields(last)))


# every field but `at`, fetched in one C call (a generator of getattr()s cost 10 % of an idle supervisor)
_restamp_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(MetricsSample) if f.name != "at"))


class Scrapers:
    """The scrape loops (by instance: its URL, the loop, its task) and what they brought."""

    def __init__(
        self,
        supervisor: Supervisor,
        feed: Broadcaster,
        spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
        log: Callable[[str], None],
        *,
        enabled: bool = True,
        interval: float = 1.0,
    ) -> None:
        self.supervisor = supervisor
        self.feed = feed
        self._spawn = spawn
        self._log = log
        self.enabled = enabled
        self.interval = interval
        self.loops: dict[str, tuple[str, ScrapeLoop, asyncio.Task[Any]]] = {}
        self.samples: dict[str, deque[dict[str, Any]]] = {}
        # the last sample of each instance, its encoding, and its feed line's halves around the time
        self._encoded: dict[str, tuple[Any, dict[str, Any], tuple[bytes, bytes] | None]] = {}
        self.keep_text = False  # keep each last payload (the session's /metrics endpoint reads them)

    def sync(self) -> None:
        """A loop for each instance that serves, on its URL now; none for the others."""
        if not self.enabled:
            return
        launcher = self.supervisor.launcher
        lean = LeanFetch(launcher.pool if isinstance(launcher, LeanLauncher) else LeanLauncher().pool)
        for st in self.supervisor.status():
            url = scrape_url(st.spec, st.state)  # a router's: its Prometheus port (vllm_router_*)
            current = self.loops.get(st.name)
            if current and current[0] != url:
                current[1].stop()
                current[2].cancel()
                del self.loops[st.name]
                current = None
            if current is None and url is not None:
                key = st.spec.api_key
                loop = ScrapeLoop(  # the lean client where it can; httpx for https and keys (attached)
                    st.name,
                    url,
                    self._sink(st.name),
                    fetch=lean if lean.handles(url + "/metrics", key) else None,
                    api_key=key,
                    interval=self.interval,
                )
                self.loops[st.name] = (url, loop, self._spawn(loop.run()))
        listed = {st.name for st in self.supervisor.status()}
        for name in [n for n in self.loops if n not in listed]:  # a new layout dropped it (attached)
            _, loop, task = self.loops.pop(name)
            loop.stop()
            task.cancel()
        for _, loop, _ in self.loops.values():
            loop.keep_text = self.keep_text  # the exporter reads the last payload

    def stop(self) -> None:
        for _, loop, task in self.loops.values():
            loop.stop()
            task.cancel()
        self.loops.clear()

    def payloads(self) -> tuple[dict[str, str], dict[str, bool]]:
        """Each instance's last /metrics text (where one was kept), and whether its last scrape worked."""
        texts: dict[str, str] = {}
        up: dict[str, bool] = {}
        for name, (_, loop, _) in self.loops.items():
            up[name] = loop.last_text is not None  # kept on success, dropped on a failed scrape
            if loop.last_text:
                texts[name] = loop.last_text
        return texts, up

    def _sink(self, name: str) -> Callable[[Any], None]:
        return lambda sample: self.on_sample(name, sample)

    def on_sample(self, name: str, sample: Any) -> None:
        last = self._encoded.get(name)
        template: tuple[bytes, bytes] | None = None
        if last is not None and _restamped(sample, last[0]):
            encoded = {**last[1], "at": sample.at}  # a steady server's sample (MetricsWindow.update)
            template = last[2]
        else:
            try:
                encoded = encode_sample(sample)
            except Exception as exc:  # noqa: BLE001 — a sample that cannot be sent must not end the scrape loop
                self._log(f"{name}: metrics sample not encodable: {exc!r}")
                return
        self.samples.setdefault(name, deque(maxlen=SAMPLE_HISTORY)).append(encoded)
        if sample.running is not None or sample.waiting is not None:  # the stuck watchdog, idle sleep
            busy = (sample.running or 0) + (sample.waiting or 0) > 0
            progress = (sample.prompt_tokens_total, sample.generation_tokens_total)  # counters only
            self.supervisor.observe_load(name, busy=busy, progress=progress)
        if self.feed:
            if template is None:
                template = _line_template({"type": "sample", "sample": {**encoded, "at": _AT}})
            self.feed.broadcast_line(template[0] + dumps(sample.at) + template[1], held=True)
        self._encoded[name] = (sample, encoded, template)
