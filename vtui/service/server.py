"""The session supervisor process: one per session, the owner of its instances.

It runs the core `Supervisor` (state machines, restart policy, adoption, stops), one `ScrapeLoop` per
READY instance, optionally the NVML `GpuSampler`, and keeps bounded histories: an hour of 1 Hz metrics
samples per instance, the recent events, the startup facts and the flag history of each instance
(persisted next to the run records, so a successor gets them back). Clients talk HTTP/1.1 (h11) on
`<state dir>/<session>.sock` (0600 in the 0700 state dir):

    GET  /status[?brief=1]        session, supervisor pid, layout file, instance snapshots
    POST /layout {path}           run this layout file from now on (same session)
    POST /start {names, force}    preflight + launch; returns once spawned (409: preflight problems,
                                  the GPU memory check's included unless force)
    POST /wait {names, timeout}   until each is READY/FAILED/STOPPED/CRASHED for good
    POST /stop {names, grace}     returns once no process of any named instance is alive
    POST /restart {name, set, unset}
    POST /sleep {name, level}     vLLM sleep mode (loopback binds, `sleep_mode = true`); 409: refused
    POST /wake {name}             /wake_up; returns once READY again (409: refused)
    GET  /logs?name=N&n=50        the log's last lines (across rotations)
    GET  /events?n=200            recent events
    GET  /history?name=N[&n=K]    the instance's metrics samples (the last K)
    GET  /pids                    every live process of each running instance
    GET  /feed                    NDJSON stream: hello (status), then events, statuses, samples
    POST /shutdown {stop}         end supervision (instances keep running unless stop)

With `[session] metrics_port` it also serves the session's Prometheus `GET /metrics` on TCP
(`service.exporter`, bound to `metrics_host`, 127.0.0.1 by default). Attached servers (engine =
"external") are watched and scraped like the others, never started or stopped (`/stop` lists them under
"attached"), and keep no supervisor alive on their own.

Crash-only: everything it must not forget is on disk before it matters (run records are written ahead
of each spawn), so `kill -9` loses nothing but the sample history. It exits by itself once no instance
runs and no client has been connected for `idle_grace` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11

from vtui.core import notify
from vtui.core.atomic import atomic_write_text
from vtui.core.attached import Attached
from vtui.core.events import Event, Notice, PhaseChanged, ProcessExited, StateChanged
from vtui.core.logfile import read_tail
from vtui.core.model import Layout
from vtui.core.notify import Notifier
from vtui.core.preflight import PreflightError
from vtui.core.replicas import describe
from vtui.core.runstate import masked
from vtui.core.state import State
from vtui.core.supervision import kill_marked
from vtui.core.supervisor import SleepRefused, Supervisor
from vtui.service import locations
from vtui.service.exporter import MetricsEndpoint, render
from vtui.service.probes import LeanLauncher, LeanScrapeLoop
from vtui.service.wire import encode_event, encode_facts, encode_gpu, encode_sample, encode_status

__all__ = ["SessionService"]

SAMPLE_HISTORY = 3600  # one hour of 1 Hz samples per instance
EVENT_HISTORY = 2000
FEED_QUEUE = 2000  # per client; a client that falls this far behind is dropped
FLAG_HISTORY = 50
SCRAPE_STATES = frozenset({State.READY, State.UNHEALTHY, State.ASLEEP, State.WAKING})


class _BadRequest(Exception):
    def __init__(self, status: int, message: str, problems: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.problems = list(problems)


class SessionService:
    """One session's supervision plus its socket server. `serve()` runs until `shutdown()` or idleness."""

    def __init__(
        self,
        layout: Layout,
        *,
        supervisor: Supervisor | None = None,
        socket_file: Path | None = None,
        idle_grace: float = 30.0,
        scrape: bool = True,
        gpu: bool = False,
        scrape_interval: float = 1.0,
    ) -> None:
        self.supervisor = supervisor or Supervisor(layout, launcher=LeanLauncher(), adopt_unlisted=True)
        self.session = self.supervisor.session
        self.layout_path = str(layout.path) if layout.path else None
        # the layout file's instances, replica groups expanded (others: adopted leftovers)
        self._file_names = set(self.supervisor.layout.names())
        self.socket_file = socket_file or locations.socket_path(self.session)
        self.state_file = locations.paths.state_dir() / f"{locations._safe(self.session)}.service.json"
        self.idle_grace = idle_grace
        self.scrape = scrape
        self.gpu = gpu
        self.scrape_interval = scrape_interval
        self.started_at = time.time()
        self.events: deque[dict[str, Any]] = deque(maxlen=EVENT_HISTORY)
        self.samples: dict[str, deque[dict[str, Any]]] = {}
        self.last_gpu: dict[str, Any] | None = None
        self.facts: dict[str, dict[str, Any]] = {}
        self.flag_history: dict[str, list[dict[str, Any]]] = {}
        self._feeds: set[asyncio.Queue[bytes | None]] = set()
        self._clients = 0
        self._last_client = time.monotonic()
        self._scrapers: dict[str, tuple[str, Any, asyncio.Task]] = {}
        self._gpu_sampler: Any = None
        self._server: asyncio.AbstractServer | None = None
        self._done = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._load_state()
        self.notifier: Notifier | None = Notifier.from_session(layout.session, log=log)
        self._troubled: set[str] = set()  # crashed or unhealthy since their last READY (-> recovered)
        self._exporter: MetricsEndpoint | None = None  # [session] metrics_port
        self.supervisor.subscribe(self._on_event)

    # -- persisted context -------------------------------------------------------------------------
    def _load_state(self) -> None:
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        self.facts = {k: v for k, v in (data.get("facts") or {}).items() if isinstance(v, dict)}
        self.flag_history = {k: list(v) for k, v in (data.get("flag_history") or {}).items()}

    def _save_state(self) -> None:
        data = {"facts": self.facts, "flag_history": self.flag_history}
        self._spawn(asyncio.to_thread(atomic_write_text, self.state_file, json.dumps(data), 0o600))

    # -- events ------------------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        encoded = encode_event(event)
        self.events.append(encoded)
        if isinstance(event, (StateChanged, PhaseChanged, ProcessExited)):
            self._broadcast_status()  # first: a client hearing of the event already has the snapshot
        self._broadcast({"type": "event", "event": encoded})
        if isinstance(event, StateChanged):
            self._on_state(event)
            self._tell(event)

    def _tell(self, event: StateChanged) -> None:
        """The `[session] on_event` / webhook notification a state change makes, once per change."""
        name, new, old = event.instance, event.new, event.old
        kind: str | None = None
        details: dict[str, Any] = {"from": old.value, "to": new.value}
        inst = self.supervisor.instances.get(name)
        if new is State.CRASHED:
            kind = notify.CRASHED
            self._troubled.add(name)
        elif new in (State.UNHEALTHY, State.UNREACHABLE):
            self._troubled.add(name)
        elif new is State.FAILED:
            budget = inst.spec.restart.max_restarts if inst is not None else 0
            spent = old is State.CRASHED and inst is not None and budget > 0 and inst.attempt >= budget
            kind = notify.RESTART_BUDGET_EXHAUSTED if spent else notify.FAILED
            details["restarts"] = inst.restarts if inst is not None else None
        elif new is State.READY and old is State.WAKING:
            kind = notify.WOKE
        elif new is State.READY and name in self._troubled:
            self._troubled.discard(name)
            kind = notify.RECOVERED
            details["restarts"] = inst.restarts if inst is not None else None
        elif new is State.ASLEEP and old is State.READY:
            kind = notify.ASLEEP
            details["level"] = inst.sleep_level if inst is not None else None
        elif new is State.STOPPED:
            self._troubled.discard(name)
        if kind is None or self.notifier is None:
            return
        self.notifier.notify(
            notify.NotifyEvent(kind, name, self.session, event.reason or "", event.at, details)
        )

    def _on_state(self, event: StateChanged) -> None:
        inst = self.supervisor.instances.get(event.instance)
        if inst is None:
            return
        history = self.flag_history.setdefault(event.instance, [])
        if event.new is State.STARTING and event.reason != "adopted":
            history.append({"at": event.at, "flags": masked(inst.spec.flags), "outcome": None})
            del history[:-FLAG_HISTORY]
            self._save_state()
        elif event.new is State.READY and event.old is State.STARTING and event.reason != "adopted":
            # a launch came up: its run's lines hold the startup (a wake's or a recovery's do not)
            if history and history[-1]["outcome"] is None:
                history[-1]["outcome"] = "ready"
            self._remember_facts(event.instance, list(inst.run_lines))
        elif event.new in (State.CRASHED, State.FAILED) and history and history[-1]["outcome"] is None:
            history[-1]["outcome"] = event.new.value
            self._save_state()
        elif event.new is State.READY and event.instance not in self.facts and not isinstance(inst, Attached):
            self._spawn(self._facts_from_log(event.instance))  # adopted, nothing persisted
        self._sync_scrapers()

    def _remember_facts(self, name: str, lines: list[str]) -> None:
        from vtui.telemetry.startup_log import parse_startup

        self.facts[name] = encode_facts(parse_startup(lines))
        self._save_state()
        self._broadcast({"type": "facts", "instance": name, "facts": self.facts[name]})

    async def _facts_from_log(self, name: str) -> None:
        inst = self.supervisor.instances.get(name)
        if inst is None or inst.log_path is None:
            return
        lines = await asyncio.to_thread(read_tail, inst.log_path, 5000)
        self._remember_facts(name, lines)

    def _broadcast(self, message: dict[str, Any]) -> None:
        if not self._feeds:
            return
        line = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        for queue in list(self._feeds):
            try:
                queue.put_nowait(line)
            except asyncio.QueueFull:  # too slow a reader: end its feed rather than buffer without bound
                self._feeds.discard(queue)
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(None)

    def _broadcast_status(self) -> None:
        if self._feeds:
            self._broadcast({"type": "status", "instances": self._statuses()})

    def _statuses(self) -> list[dict[str, Any]]:
        return [
            encode_status(
                st,
                in_layout=st.name in self._file_names,
                facts=self.facts.get(st.name),
                **describe(st.spec, self.supervisor.routers),
            )
            for st in self.supervisor.status()
        ]

    # -- telemetry ---------------------------------------------------------------------------------
    def _sync_scrapers(self) -> None:
        if not self.scrape:
            return
        launcher = self.supervisor.launcher
        pool = launcher.pool if isinstance(launcher, LeanLauncher) else LeanLauncher().pool
        for st in self.supervisor.status():
            if st.spec.engine == "router":  # its /metrics is one replica's (vllm_router_* are elsewhere)
                continue
            url = st.spec.base_url
            current = self._scrapers.get(st.name)
            if current and (st.state not in SCRAPE_STATES or current[0] != url):
                current[1].stop()
                current[2].cancel()
                del self._scrapers[st.name]
                current = None
            if current is None and st.state in SCRAPE_STATES:
                loop: Any
                if st.spec.api_key or not pool().handles(url + "/metrics", "GET"):
                    from vtui.telemetry.scrape import ScrapeLoop  # https, a key: an attached server

                    loop = ScrapeLoop(
                        st.name,
                        url,
                        self._sample_sink(st.name),
                        interval=self.scrape_interval,
                        api_key=st.spec.api_key,
                    )
                else:
                    loop = LeanScrapeLoop(
                        st.name, url, self._sample_sink(st.name), pool, interval=self.scrape_interval
                    )
                self._scrapers[st.name] = (url, loop, self._spawn(loop.run()))
        listed = {st.name for st in self.supervisor.status()}
        for name in [n for n in self._scrapers if n not in listed]:  # a new layout dropped it (attached)
            _, loop, task = self._scrapers.pop(name)
            loop.stop()
            task.cancel()
        for _, loop, _ in self._scrapers.values():
            loop.keep_text = self._exporter is not None  # the exporter reads the last payload

    def _sample_sink(self, name: str) -> Callable[[Any], None]:
        return lambda sample: self._on_sample(name, sample)

    def _on_sample(self, name: str, sample: Any) -> None:
        try:
            encoded = encode_sample(sample)
        except Exception as exc:  # noqa: BLE001 — a sample that cannot be sent must not end the scrape loop
            log(f"{name}: metrics sample not encodable: {exc!r}")
            return
        self.samples.setdefault(name, deque(maxlen=SAMPLE_HISTORY)).append(encoded)
        if sample.running is not None or sample.waiting is not None:  # the stuck watchdog, idle sleep
            busy = (sample.running or 0) + (sample.waiting or 0) > 0
            progress = (sample.prompt_tokens_total, sample.generation_tokens_total)  # counters only
            self.supervisor.observe_load(name, busy=busy, progress=progress)
        self._broadcast({"type": "sample", "sample": encoded})

    def _start_gpu(self) -> None:
        """The session's one GPU sampler (the dashboards show its samples: they run none of their own):
        NVML, else the simulated GPUs of the layout's sims."""
        from vtui.telemetry.gpu import GpuSampler

        if not self.gpu:  # VTUI_SUPERVISOR_GPU=0: the status says so (gpu_sampling) and dashboards sample
            return
        loop = asyncio.get_running_loop()

        def on_sample(sample: Any) -> None:
            encoded = encode_gpu(sample)
            loop.call_soon_threadsafe(self._on_gpu, encoded)

        def simulated(owners: Any) -> Any:  # no NVIDIA driver: the sims' GPUs, as the dashboard draws them
            from vtui.sim.gpuview import simulated_sample

            return simulated_sample(self.supervisor.layout, owners)

        def owners() -> dict[int, str]:  # no process walk each second for a driverless box with no sims
            sampler = self._gpu_sampler
            if sampler is not None and sampler.unusable is not None:
                if not any(spec.engine == "sim" for spec in self.supervisor.layout.instances):
                    return {}
            return self._pid_owner()

        self._gpu_sampler = GpuSampler(on_sample, interval=1.0, pid_owner=owners, fallback=simulated)
        self._gpu_sampler.start()

    def _on_gpu(self, encoded: dict[str, Any]) -> None:
        self.last_gpu = encoded
        self._broadcast({"type": "gpu", "sample": encoded})

    def _pids(self) -> dict[str, list[int]]:
        """Every live process of each running instance (GPU memory is held by EngineCore/Workers)."""
        return {pid_owner: sorted(pids) for pid_owner, pids in self._trees().items()}

    def _trees(self) -> dict[str, set[int]]:
        trees: dict[str, set[int]] = {}
        for st in self.supervisor.status():
            if st.state.running:
                with contextlib.suppress(Exception):
                    trees[st.name] = self.supervisor.pids_of(st.name)
        return trees

    def _pid_owner(self) -> dict[int, str]:
        owners: dict[int, str] = {}
        for st in self.supervisor.status():
            if st.state.running:
                with contextlib.suppress(Exception):
                    for pid in self.supervisor.pids_of(st.name):
                        owners[pid] = st.name
        return owners

    # -- the session's Prometheus endpoint ---------------------------------------------------------------
    async def _configure_exporter(self) -> None:
        """Serve `[session] metrics_port` on `metrics_host` (rebound when a new layout moves it, ended
        when it drops it). A port that cannot be bound is said (log, a notice) and supervision goes on."""
        session = self.supervisor.layout.session
        where = (session.metrics_host, session.metrics_port) if session.metrics_port else None
        current = self._exporter
        if current is not None and (current.host, current.port) == where:
            return
        if current is not None:
            await current.stop()
            self._exporter = None
        if where is not None:
            endpoint = MetricsEndpoint(where[0], where[1], self._render_metrics)
            try:
                await endpoint.start()
            except OSError as exc:
                text = f"metrics_port {where[1]} on {where[0]}: cannot serve /metrics: {exc.strerror or exc}"
                log(text)
                self._on_event(Notice(None, "error", text))
            else:
                self._exporter = endpoint
                log(f"serving the session's Prometheus metrics on http://{where[0]}:{where[1]}/metrics")
        self._sync_scrapers()

    async def _render_metrics(self) -> str:
        statuses = self.supervisor.status()
        texts: dict[str, str] = {}
        up: dict[str, bool] = {}
        for name, (_, loop, _) in self._scrapers.items():
            up[name] = loop.last_text is not None  # kept on success, dropped on a failed scrape
            if loop.last_text:
                texts[name] = loop.last_text
        gpu = self.last_gpu
        if not (gpu and gpu.get("available")) and any(st.spec.engine == "sim" for st in statuses):
            gpu = await asyncio.to_thread(self._simulated_gpus)
        # ~20 ms for 8 real payloads (benchmarks/bench_exporter.py): off the loop, on frozen snapshots
        return await asyncio.to_thread(partial(render, statuses, texts, up=up, gpu=gpu))

    def _simulated_gpus(self) -> dict[str, Any] | None:
        """Without NVML: the simulated GPUs the layout's `vtui sim` instances hold memory on."""
        from vtui.sim.gpuview import simulated_sample

        sample = simulated_sample(self.supervisor.layout, self._pid_owner())
        return encode_gpu(sample) if sample is not None else None

    # -- requests ----------------------------------------------------------------------------------
    async def handle(self, method: str, target: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        route = (method, url.path)
        try:
            if route == ("GET", "/status"):
                return 200, self.status(brief=query.get("brief") == "1")
            if route == ("POST", "/layout"):
                return 200, await self._set_layout(body)
            if route == ("POST", "/start"):
                names = self._names(body)
                self._refuse_unresolved(names if names is not None else self.supervisor.layout.names())
                await self.supervisor.start(names, force=bool(body.get("force")))
                return 200, {"ok": True}
            if route == ("POST", "/sleep"):
                name = self._one_name(body)
                level = body.get("level", 1)
                if level not in (1, 2) or isinstance(level, bool):
                    raise _BadRequest(400, f"level: expected 1 or 2, got {level!r}")
                await self.supervisor.sleep(name, level)
                return 200, {"ok": True, "state": self.supervisor.instances[name].state.value}
            if route == ("POST", "/wake"):
                name = self._one_name(body)
                await self.supervisor.wake(name)
                return 200, {"ok": True, "state": self.supervisor.instances[name].state.value}
            if route == ("POST", "/wait"):
                states = await self.supervisor.wait_settled(self._names(body), timeout=body.get("timeout"))
                return 200, {"states": {n: s.value for n, s in states.items()}}
            if route == ("POST", "/stop"):
                return 200, await self._stop(self._names(body), body.get("grace"))
            if route == ("POST", "/restart"):
                return 200, await self._restart(body)
            if route == ("GET", "/logs"):
                return 200, await self._logs(query)
            if route == ("GET", "/events"):
                n = int(query.get("n", 200))
                return 200, {"events": list(self.events)[-n:] if n > 0 else []}
            if route == ("GET", "/pids"):
                return 200, {"pids": await asyncio.to_thread(self._pids)}
            if route == ("GET", "/history"):
                samples = list(self.samples.get(query.get("name", ""), ()))
                n = int(query.get("n", len(samples)))
                return 200, {"samples": samples[-n:] if n > 0 else []}
            if route == ("POST", "/shutdown"):
                self._spawn(self.shutdown(stop_instances=bool(body.get("stop"))))
                return 200, {"ok": True}
        except _BadRequest as exc:
            return exc.status, {"error": str(exc), "problems": exc.problems or [str(exc)]}
        except PreflightError as exc:
            return 409, {"error": "preflight", "problems": list(exc.problems)}
        except SleepRefused as exc:
            return 409, {"error": str(exc), "problems": [str(exc)]}
        except KeyError as exc:
            message = exc.args[0] if exc.args else str(exc)
            return 404, {"error": str(message), "problems": [str(message)]}
        except (ValueError, TypeError) as exc:
            return 400, {"error": str(exc), "problems": [str(exc)]}
        return 404, {"error": f"no route {method} {url.path}"}

    def status(self, brief: bool = False) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "session": self.session,
            "supervisor_pid": os.getpid(),
            "layout_path": self.layout_path,
            "started_at": self.started_at,
        }
        if not brief:
            answer["instances"] = self._statuses()
            answer["flag_history"] = self.flag_history
            answer["gpu"] = self.last_gpu
            answer["gpu_sampling"] = self.gpu  # the feed carries GPU samples (clients run no sampler)
        return answer

    def _one_name(self, body: dict[str, Any]) -> str:
        name = body.get("name")
        if not isinstance(name, str):
            raise _BadRequest(400, "name: expected an instance name")
        if name not in self.supervisor.instances:
            raise KeyError(f"no instance named {name} in session {self.session}")
        return name

    def _names(self, body: dict[str, Any]) -> list[str] | None:
        names = body.get("names")
        if names is None:
            return None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _BadRequest(400, "names: expected a list of instance names")
        return names

    async def _set_layout(self, body: dict[str, Any]) -> dict[str, Any]:
        from vtui.layouts import LayoutError, load_layout

        path = body.get("path")
        if not isinstance(path, str):
            raise _BadRequest(400, "path: expected the layout file's path")
        env = body.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise _BadRequest(400, "env: expected an object of strings")
        # The values of the layout's ${VAR}s as the requesting command sees them (a supervisor started
        # earlier, by `ps` in another shell, may lack them); its instances inherit them too.
        os.environ.update({str(k): v for k, v in env.items()})
        try:
            from vtui.telemetry.flagschema import layout_flags

            flags = await asyncio.to_thread(layout_flags, path)  # the instances' own vLLMs' flags
            layout = await asyncio.to_thread(partial(load_layout, path, unset_ok=True, flags=flags))
        except LayoutError as exc:
            raise _BadRequest(400, f"{path} does not validate", [str(p) for p in exc.problems]) from exc
        except OSError as exc:
            raise _BadRequest(400, f"{path}: {exc.strerror or exc}") from exc
        if layout.session.name != self.session:
            raise _BadRequest(409, f"{path} is session {layout.session.name}, not {self.session}")
        self.supervisor.set_layout(layout)
        if self.notifier is not None:
            self.notifier.close(wait=0)
        self.notifier = Notifier.from_session(layout.session, log=log)
        self._file_names = set(self.supervisor.resolve(layout.names()))
        self.layout_path = str(layout.path) if layout.path else path
        self._write_registration()
        await self._configure_exporter()
        self._broadcast_status()
        return {"ok": True, "layout_path": self.layout_path}

    async def _stop(self, names: list[str] | None, grace: float | None) -> dict[str, Any]:
        asked = (
            self.supervisor.resolve(names)
            if names is not None
            else [st.name for st in self.supervisor.status()]
        )
        instances = self.supervisor.instances
        attached = [n for n in asked if isinstance(instances.get(n), Attached)]  # watched, never stopped
        wanted = [n for n in asked if n not in attached]
        notices: list[str] = []  # what the stop had to say (requests cut, SIGKILL needed), for the answer

        def collect(event: Event) -> None:
            if isinstance(event, Notice) and event.level != "info" and event.instance in wanted:
                notices.append(event.text)

        unsubscribe = self.supervisor.subscribe(collect)
        try:
            await self.supervisor.stop(wanted, grace=grace)
        finally:
            unsubscribe()
        # The launcher's stop ends each tree; make sure nothing marked as one of them outlived it.
        leftovers: list[int] = []
        for name in wanted:
            leftovers += await asyncio.to_thread(kill_marked, f"{self.session}/{name}")
        urls = {n: instances[n].spec.base_url for n in attached}
        return {"stopped": wanted, "leftovers": leftovers, "notices": notices, "attached": urls}

    def _refuse_unresolved(self, names: list[str]) -> None:
        from vtui.layouts import unresolved

        layout = self.supervisor.layout
        # a replica's ${VAR}s are its group's entry's
        asked = set(names) | {s.group for s in layout.instances if s.name in names and s.group}
        missing = {n: v for n, v in unresolved(layout).items() if n in asked}
        if missing:
            problems = [
                f"{name}: {', '.join('${' + v + '}' for v in found)} not set in the supervisor's environment "
                "(run `vtui up` from a shell where it is set)"
                for name, found in missing.items()
            ]
            raise _BadRequest(400, problems[0], problems)

    async def _restart(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("name")
        if not isinstance(name, str):
            raise _BadRequest(400, "name: expected an instance name")
        inst = self.supervisor.instances.get(name)
        if inst is None:
            raise KeyError(f"no instance named {name} in session {self.session}")
        self._refuse_unresolved([name])
        set_flags = body.get("set") or {}
        unset = body.get("unset") or []
        if not isinstance(set_flags, dict) or not isinstance(unset, list):
            raise _BadRequest(400, "set: expected an object of flags, unset: a list of flag names")
        spec = inst.spec.with_flags(set_flags, tuple(unset)) if (set_flags or unset) else None
        await self.supervisor.restart(name, spec)
        return {"ok": True, "flags": masked(self.supervisor.instances[name].spec.flags)}

    async def _logs(self, query: dict[str, str]) -> dict[str, Any]:
        name = query.get("name", "")
        inst = self.supervisor.instances.get(name)
        if inst is None:
            raise KeyError(f"no instance named {name} in session {self.session}")
        if isinstance(inst, Attached):
            raise _BadRequest(
                400,
                f"{name} is an attached server ({inst.spec.base_url}): its log is where it runs, vtui has none",
            )
        n = int(query.get("n", 50))
        path = inst.log_path
        lines = await asyncio.to_thread(read_tail, path, n) if path is not None and path.exists() else []
        return {"name": name, "log_path": str(path) if path else None, "lines": lines}

    # -- HTTP --------------------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients += 1
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await self._read_request(conn, reader)
                if request is None:
                    break
                target = request.target.decode()
                if request.method == b"GET" and target.split("?")[0] == "/feed":
                    await self._feed(conn, reader, writer)
                    break
                try:
                    payload = json.loads(body) if body else {}
                    if not isinstance(payload, dict):
                        raise ValueError("expected a JSON object")
                except ValueError as exc:
                    status, answer = 400, {"error": f"bad JSON body: {exc}"}
                else:
                    status, answer = await self.handle(request.method.decode(), target, payload)
                data = json.dumps(answer).encode()
                headers = [("content-type", "application/json"), ("content-length", str(len(data)))]
                writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
                writer.write(conn.send(h11.Data(data=data)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    break
                conn.start_next_cycle()
        except (h11.RemoteProtocolError, h11.LocalProtocolError, ConnectionError):
            pass
        finally:
            self._clients -= 1
            self._last_client = time.monotonic()
            with contextlib.suppress(Exception):
                writer.close()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        chunks: list[bytes] = []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return request, b"".join(chunks)
            else:  # ConnectionClosed, PAUSED
                return None, b""

    async def _feed(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """The streamed feed: a hello line with the full status, then one JSON object per line."""
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(FEED_QUEUE)
        self._feeds.add(queue)
        headers = [("content-type", "application/x-ndjson"), ("cache-control", "no-store")]
        writer.write(conn.send(h11.Response(status_code=200, headers=headers)) or b"")
        hello = {"type": "hello", **self.status()}
        writer.write(conn.send(h11.Data(data=(json.dumps(hello) + "\n").encode())) or b"")
        await writer.drain()
        gone = asyncio.ensure_future(reader.read(1))  # EOF (or anything): the client left
        try:
            while True:
                get = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
                if gone in done:
                    get.cancel()
                    return
                line = get.result()
                if line is None:
                    return
                batch = [line]
                while not queue.empty():  # what piled up goes out in one write
                    more = queue.get_nowait()
                    if more is None:
                        break
                    batch.append(more)
                writer.write(conn.send(h11.Data(data=b"".join(batch))) or b"")
                await writer.drain()
        finally:
            self._feeds.discard(queue)
            gone.cancel()

    # -- lifecycle ---------------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _write_registration(self) -> None:
        info = {
            "session": self.session,
            "pid": os.getpid(),
            "layout_path": self.layout_path,
            "socket": str(self.socket_file),
            "started_at": self.started_at,
        }
        atomic_write_text(locations.info_path(self.session), json.dumps(info), mode=0o600)

    def _busy(self) -> bool:
        """Something of the session's own runs (an attached server alone keeps no supervisor up)."""
        sup = self.supervisor
        return bool(sup._pending) or any(
            (i.state.running or i.state is State.BACKOFF) and not isinstance(i, Attached)
            for i in sup.instances.values()
        )

    async def _idle_watch(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, max(0.05, self.idle_grace / 4)))
            if self._busy() or self._clients > 0:
                self._last_client = time.monotonic()
            elif time.monotonic() - self._last_client >= self.idle_grace:
                await self.shutdown()
                return

    async def serve(self) -> None:
        """Adopt what runs, bind the socket, supervise until shutdown."""
        self._loop = asyncio.get_running_loop()
        await self.supervisor.adopt()
        for st in self.supervisor.status():  # adopted READY ones: facts persisted, else from the log
            if st.state is State.READY and st.name not in self.facts:
                self._spawn(self._facts_from_log(st.name))
        self._sync_scrapers()
        self._start_gpu()
        self.socket_file.unlink(missing_ok=True)
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._connection, path=str(self.socket_file))
        finally:
            os.umask(old)
        os.chmod(self.socket_file, 0o600)
        self._write_registration()
        await self._configure_exporter()
        watch = self._spawn(self._idle_watch())
        runner = self._spawn(self.supervisor.run())
        try:
            await self._done.wait()
        finally:
            watch.cancel()
            runner.cancel()

    async def shutdown(self, stop_instances: bool = False) -> None:
        if self._done.is_set():
            return
        if stop_instances:
            await self._stop(None, None)
        if self._server is not None:
            self._server.close()
        for queue in list(self._feeds):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)
        for _, loop, task in self._scrapers.values():
            loop.stop()
            task.cancel()
        self._scrapers.clear()
        if self._exporter is not None:
            await self._exporter.stop()
            self._exporter = None
        if self._gpu_sampler is not None:
            await asyncio.to_thread(self._gpu_sampler.stop)
        await self.supervisor.close()
        if self.notifier is not None:
            await asyncio.to_thread(self.notifier.close)
        with contextlib.suppress(OSError):
            info = json.loads(locations.info_path(self.session).read_text())
            if info.get("pid") == os.getpid():
                locations.info_path(self.session).unlink()
                self.socket_file.unlink(missing_ok=True)
        self._done.set()


def log(message: str) -> None:
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} vtui supervisor[{os.getpid()}]: {message}",
        file=sys.stderr,
        flush=True,
    )
