"""The session's one Prometheus target (`[session] metrics_port`): `GET /metrics` on `metrics_host`
(127.0.0.1 unless the layout says otherwise), served by the session supervisor.

What it exposes (Prometheus text format 0.0.4; HELP and TYPE once per family, each family's samples in
one group):

- every instance's `vllm:` families (a vllm-router's: its `vllm_router_*`, from its Prometheus port),
  from the `/metrics` text the supervisor's own scrape loop fetched last (nothing is scraped twice),
  each sample with an `instance` label (the instance's name; a label
  `instance` the server itself sent becomes `exported_instance`). Scrape it with `honor_labels: true`,
  or Prometheus renames this `instance` to `exported_instance` too;
- vtui's own: `vtui_instance_state{instance, state}` (one-hot: 1 for the state the instance is in, 0 for
  every other state of `core.state.State`), `vtui_instance_info{instance, engine, model, url}` (1),
  `vtui_instance_restarts_total{instance}` (the restart policy's restarts of the run), `vtui_instance_up`
  (1 when the last /metrics scrape of it worked), `vtui_instance_gpu_memory_bytes{instance, gpu}` (GPU
  memory held by its processes: NVML per process, or the simulated GPUs of `vtui sim`), and
  `vtui_gpu_memory_used_bytes{gpu}` / `vtui_gpu_memory_total_bytes{gpu}`.

`render` is pure (tests feed it texts); `MetricsEndpoint` is the small h11 server around it;
`SessionMetrics` keeps one where the layout says.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import h11

from vtui.core.events import Notice
from vtui.core.model import SessionSpec
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.telemetry.promtext import parse_labels

__all__ = ["CONTENT_TYPE", "MetricsEndpoint", "SessionMetrics", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The sample-name suffixes a family's samples may carry (histograms, summaries, counters, info).
_SUFFIXES = ("_bucket", "_sum", "_count", "_created", "_total", "_info", "_gsum", "_gcount")
_PASSED = ("vllm:", "vllm_router_")  # the families passed on: vLLM's and its router's


@dataclass
class _Family:
    name: str
    help: str = ""
    type: str = "untyped"
    lines: list[str] = field(default_factory=list)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def _with_instance(line: str, name: str, instance: str) -> str:
    """`name{a="b"} 1` -> `name{instance="X",a="b"} 1` (a sent `instance` label -> `exported_instance`)."""
    rest = line[len(name) :]
    own = f'instance="{_escape(instance)}"'
    if not rest.startswith("{"):
        return f"{name}{{{own}}}{rest}"
    close = rest.rfind("}")
    if close < 0:
        return ""
    raw = rest[1:close]
    if "instance" in raw:
        pairs = parse_labels(raw)
        if any(k == "instance" for k, _ in pairs):
            raw = _labels(("exported_instance" if k == "instance" else k, v) for k, v in pairs)
    return f"{name}{{{own}{',' + raw if raw.strip() else ''}}}{rest[close + 1 :]}"


def _belongs(name: str, family: _Family) -> bool:
    return name == family.name or (name.startswith(family.name) and name[len(family.name) :] in _SUFFIXES)


def _add_vllm(text: str, instance: str, families: dict[str, _Family]) -> None:
    """The `vllm:` (or `vllm_router_`) families of one instance's payload, relabelled, into `families`
    (first HELP/TYPE seen for a name wins)."""
    current: _Family | None = None
    for line in text.split("\n"):
        line = line.rstrip("\r")
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
                continue
            name = parts[2]
            if not name.startswith(_PASSED):
                current = None
                continue
            current = families.get(name)
            if current is None:
                current = families[name] = _Family(name)
            if parts[1] == "HELP" and not current.help:
                current.help = parts[3] if len(parts) > 3 else ""
            elif parts[1] == "TYPE" and not current.lines and current.type == "untyped":
                current.type = parts[3].strip() if len(parts) > 3 else "untyped"
            continue
        if not line.startswith(_PASSED):
            current = None
            continue
        end = len(line)
        for mark in ("{", " ", "\t"):
            at = line.find(mark)
            if 0 < at < end:
                end = at
        name = line[:end]
        if current is None or not _belongs(name, current):
            current = families.get(name)
            if current is None:
                current = families[name] = _Family(name)
        relabelled = _with_instance(line, name, instance)
        if relabelled:
            current.lines.append(relabelled)


def _number(value: float | int) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def render(
    statuses: Iterable[InstanceStatus],
    texts: Mapping[str, str],
    *,
    up: Mapping[str, bool] | None = None,
    gpu: Mapping[str, Any] | None = None,
) -> str:
    """The whole session as one exposition: vtui's families, then every instance's `vllm:` families.
    `texts`: instance -> the last /metrics text scraped; `up`: instance -> whether that scrape worked;
    `gpu`: the last GPU sample as `service.wire.encode_gpu` gives it (or None)."""
    statuses = list(statuses)
    out: list[str] = []

    def family(name: str, kind: str, help_text: str, rows: Iterable[tuple[str, float | int]]) -> None:
        out.append(f"# HELP {name} {_escape_help(help_text)}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(f"{name}{{{labels}}} {_number(value)}" for labels, value in rows)

    family(
        "vtui_instance_state",
        "gauge",
        "The instance's lifecycle state in vtui: 1 for the state it is in, 0 for the others",
        (
            (_labels((("instance", st.name), ("state", state.value))), int(st.state is state))
            for st in statuses
            for state in State
        ),
    )
    family(
        "vtui_instance_info",
        "gauge",
        "One per instance: its engine (vllm, sim, external), model and base URL",
        (
            (
                _labels(
                    (
                        ("instance", st.name),
                        ("engine", st.spec.engine),
                        ("model", st.spec.model),
                        ("url", st.spec.base_url),
                    )
                ),
                1,
            )
            for st in statuses
        ),
    )
    family(
        "vtui_instance_restarts_total",
        "counter",
        "Restarts the restart policy made of the instance's run",
        ((_labels((("instance", st.name),)), st.restarts) for st in statuses),
    )
    up = up or {}
    family(
        "vtui_instance_up",
        "gauge",
        "1 when the session supervisor's last /metrics scrape of the instance worked, else 0",
        ((_labels((("instance", st.name),)), int(bool(up.get(st.name)))) for st in statuses),
    )
    names = {st.name for st in statuses}
    held: dict[tuple[str, int], int] = {}
    gpus: list[Mapping[str, Any]] = []
    if gpu and gpu.get("available"):
        gpus = [g for g in gpu.get("gpus") or () if isinstance(g, Mapping)]
        for proc in gpu.get("processes") or ():
            owner, used = proc.get("instance"), proc.get("used_memory")
            if owner in names and isinstance(used, int):
                slot = (str(owner), int(proc.get("gpu_index", 0)))
                held[slot] = held.get(slot, 0) + used
    family(
        "vtui_instance_gpu_memory_bytes",
        "gauge",
        "GPU memory held by the instance's processes, per GPU (NVML per process; simulated GPUs for vtui sim)",
        ((_labels((("instance", n), ("gpu", str(i)))), b) for (n, i), b in sorted(held.items())),
    )
    for key, what in (("memory_used", "used"), ("memory_total", "total")):
        family(
            f"vtui_gpu_memory_{what}_bytes",
            "gauge",
            f"GPU memory {what}, per GPU, as nvidia-smi shows it",
            ((_labels((("gpu", str(g.get("index"))),)), g[key]) for g in gpus if isinstance(g.get(key), int)),
        )
    families: dict[str, _Family] = {}
    for st in statuses:
        text = texts.get(st.name)
        if text:
            _add_vllm(text, st.name, families)
    for fam in families.values():
        if not fam.lines:
            continue
        out.append(f"# HELP {fam.name} {fam.help}")
        out.append(f"# TYPE {fam.name} {fam.type}")
        out.extend(fam.lines)
    return "\n".join(out) + "\n"


class MetricsEndpoint:
    """`GET /metrics` over HTTP/1.1 (h11) on host:port; the body comes from `render` at each request."""

    def __init__(self, host: str, port: int, render: Callable[[], Awaitable[str]]) -> None:
        self.host = host
        self.port = port
        self._render = render
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Bind (OSError when the port is taken or the address is not this machine's)."""
        self._server = await asyncio.start_server(self._connection, self.host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)

    async def _request(self, conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
        request = None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await asyncio.wait_for(reader.read(65536), 60.0))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.EndOfMessage):
                return request
            elif not isinstance(event, h11.Data):  # ConnectionClosed, PAUSED
                return None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while (request := await self._request(conn, reader)) is not None:
                target = request.target.decode("latin-1").split("?")[0]
                if request.method in (b"GET", b"HEAD") and target == "/metrics":
                    status, body, kind = 200, (await self._render()).encode(), CONTENT_TYPE
                else:
                    status, body, kind = 404, b"vtui: the session's metrics are at /metrics\n", "text/plain"
                headers = [("content-type", kind), ("content-length", str(len(body)))]
                writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
                if request.method != b"HEAD":
                    writer.write(conn.send(h11.Data(data=body)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    break
                conn.start_next_cycle()
        except (h11.RemoteProtocolError, h11.LocalProtocolError, ConnectionError, asyncio.TimeoutError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()


class SessionMetrics:
    """`[session] metrics_port` as the layout says it now: a `MetricsEndpoint` on `metrics_host`, rebound
    when a new layout moves it, ended when one drops it. A port that cannot be bound is said (`log`, and an
    error `Notice` to `on_event`) and supervision goes on. `on_serving` hears whether it serves (the scrape
    loops keep their last payloads for it only then)."""

    def __init__(
        self,
        statuses: Callable[[], Sequence[InstanceStatus]],
        payloads: Callable[[], tuple[dict[str, str], dict[str, bool]]],
        gpu: Callable[[], Awaitable[dict[str, Any] | None]],
        *,
        log: Callable[[str], None],
        on_event: Callable[[Notice], None],
        on_serving: Callable[[bool], None],
    ) -> None:
        self._statuses, self._payloads, self._gpu = statuses, payloads, gpu
        self._log, self._on_event, self._on_serving = log, on_event, on_serving
        self.endpoint: MetricsEndpoint | None = None

    async def configure(self, session: SessionSpec) -> None:
        where = (session.metrics_host, session.metrics_port) if session.metrics_port else None
        current = self.endpoint
        if current is not None and (current.host, current.port) == where:
            return
        if current is not None:
            await current.stop()
            self.endpoint = None
        if where is not None:
            endpoint = MetricsEndpoint(where[0], where[1], self.render)
            try:
                await endpoint.start()
            except OSError as exc:
                text = f"metrics_port {where[1]} on {where[0]}: cannot serve /metrics: {exc.strerror or exc}"
                self._log(text)
                self._on_event(Notice(None, "error", text))
            else:
                self.endpoint = endpoint
                self._log(f"serving the session's Prometheus metrics on http://{where[0]}:{where[1]}/metrics")
        self._on_serving(self.endpoint is not None)

    async def render(self) -> str:
        statuses = self._statuses()
        texts, up = self._payloads()
        gpu = await self._gpu()
        # ~20 ms for 8 real payloads (benchmarks/bench_exporter.py): off the loop, on frozen snapshots
        return await asyncio.to_thread(partial(render, statuses, texts, up=up, gpu=gpu))

    async def stop(self) -> None:
        if self.endpoint is not None:
            await self.endpoint.stop()
            self.endpoint = None
