"""The layout's typed model: what a validated layout file becomes (vtui.layouts reads and writes it).

Frozen dataclasses, so a running supervisor can hold them and a restart with new flags is a new spec
(`spec.with_flags(...)`), never an in-place edit.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Literal, TypeVar

from vtui.core.backends import DEFAULT_BACKEND, pinning_env
from vtui.core.masking import SECRET_FLAGS as SECRET_FLAGS
from vtui.core.selfrun import module_argv

FlagValue = (
    bool | int | float | str | list[str | int | float]
)  # list: a flag taking several values (`--api-key a b`)
RestartMode = Literal["never", "on-failure", "always"]
# external: a server vtui did not start (url); router: the vllm-router a `replicas = N` entry is fronted by
# (made by `supervisor.replicas`, never written in a layout)
Engine = Literal["vllm", "sim", "external", "router"]

_K = TypeVar("_K")
_V = TypeVar("_V")

# SECRET_FLAGS (flags whose value must never appear on a command line) lives in core.masking.


def _frozen(mapping: Mapping[_K, _V] | None) -> Mapping[_K, _V]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class RestartPolicy:
    mode: RestartMode = "on-failure"
    max_restarts: int = 3
    backoff_initial: float = 2.0  # seconds before the first restart; doubles each time
    backoff_max: float = 60.0  # cap on the delay
    # STARTING longer than this (no /health 200 yet) ends the run like a crash; 0: no limit. Generous:
    # real vLLM with torch.compile + CUDA graph capture can take 10+ minutes to start on big GPUs.
    start_timeout: float = 1800.0
    # Liveness (as Kubernetes' probe): UNHEALTHY this long -> stopped and restarted, counting toward
    # max_restarts; 0: off. 2 min: a vLLM busy with long requests may miss a few /health probes.
    restart_unhealthy_after: float = 120.0
    # "Healthy but stuck": /health answers but no token is produced and no request finishes while
    # requests wait, this long (from the metrics the session supervisor scrapes); 0: off.
    restart_stuck_after: float = 600.0

    def delay(self, attempt: int) -> float:
        """Delay before restart number `attempt` (1-based): initial * 2**(attempt-1), capped."""
        return min(self.backoff_max, self.backoff_initial * (2.0 ** max(0, attempt - 1)))


@dataclass(frozen=True)
class InstanceSpec:
    name: str
    model: str
    port: int
    engine: Engine = "vllm"
    gpus: tuple[int, ...] = ()
    host: str = "127.0.0.1"
    env: Mapping[str, str] = field(default_factory=lambda: _frozen({}))
    flags: Mapping[str, FlagValue] = field(default_factory=lambda: _frozen({}))
    command: tuple[str, ...] | None = None  # replaces ["vllm", "serve"]; the model is appended
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    start_stagger: float = 0.0  # extra seconds to wait before starting this instance
    # engine = "external": the server's base URL (host and port are taken from it) and the API key to
    # send it (from a `${VAR}`; kept out of repr). Nothing is launched for it: it is watched (supervisor.attached).
    url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    # replicas > 1: copies on `port`, `port + 1`, …, each on its own GPU set (`replica_gpus`, else `gpus`
    # split in order, else chosen by free memory), fronted by vllm-router on `router_port`. The supervisor
    # runs the expansion `supervisor.replicas.supervised` makes of it: NAME-0 … NAME-(N-1) and NAME-router.
    replicas: int = 1
    router_port: int | None = None
    # the router's Prometheus port (its `vllm_router_*` series); None: a free one, kept across restarts
    router_metrics_port: int | None = None
    replica_gpus: tuple[tuple[int, ...], ...] = ()
    group: str | None = None  # a replica's or router's [[instance]] entry (the NAME of NAME-0, NAME-router)
    sleep_mode: bool = False  # vLLM sleep mode: VLLM_SERVER_DEV_MODE=1 (+ --enable-sleep-mode on GPUs)
    idle_sleep_after: float = 0.0  # no request running or waiting this long -> sleep level 1; 0: never
    force_start: bool = False  # start even when the GPUs' free memory is short (preflight warns only)
    backend: str = (
        DEFAULT_BACKEND  # which variables pin `gpus` (core.backends: cuda, rocm, xpu, tpu, ascend, cpu)
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", _frozen(self.env))
        object.__setattr__(self, "flags", _frozen(self.flags))
        object.__setattr__(self, "gpus", tuple(self.gpus))
        object.__setattr__(self, "replica_gpus", tuple(tuple(g) for g in self.replica_gpus))
        if self.command is not None:
            object.__setattr__(self, "command", tuple(self.command))

    # -- derived ---------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self.engine == "external" and self.url:
            return self.url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    @property
    def health_url(self) -> str:
        """What READY means: /health answers 200. vllm-router's /health is 503 while one worker is
        unhealthy (a replica restarting is no reason to restart the router): its /liveness."""
        return f"{self.base_url}/liveness" if self.engine == "router" else f"{self.base_url}/health"

    def not_supervised_yet(self) -> str | None:
        """Why this release's supervisor cannot run this instance (None: it can): the hook for a layout
        key accepted before the supervisor runs it. Every engine (attached servers too) and replicas
        are supervised now."""
        return None

    def replica_gpu_sets(self) -> tuple[tuple[int, ...], ...]:
        """Each replica's GPUs: `replica_gpus` when listed, else `gpus` split in order into equal
        sets (no GPUs listed: none pinned)."""
        if self.replica_gpus:
            return self.replica_gpus
        per = len(self.gpus) // self.replicas if self.gpus else 0
        return tuple(self.gpus[i * per : (i + 1) * per] for i in range(self.replicas))

    def replica_specs(self, sets: tuple[tuple[int, ...], ...] = ()) -> tuple[InstanceSpec, ...]:
        """The copies `replicas = N` stands for: `NAME-0` on `port` … `NAME-(N-1)` on `port + N - 1`,
        each one plain instance (replicas = 1) with its own GPU set (`sets` when given, else
        `replica_gpu_sets`). One replica: the spec itself."""
        if self.replicas <= 1:
            return (self,)
        return tuple(
            replace(
                self,
                name=f"{self.name}-{i}",
                port=self.port + i,
                gpus=gpus,
                replicas=1,
                router_port=None,
                router_metrics_port=None,
                replica_gpus=(),
                group=self.name,
            )
            for i, gpus in enumerate(sets or self.replica_gpu_sets())
        )

    def run_specs(self, prometheus_port: int = 0) -> tuple[InstanceSpec, ...]:
        """What this entry runs as, GPU sets as the layout gives them: its replicas (`replica_specs`),
        then its router (`router_spec`) when it has one. The supervisor's own expansion
        (`supervisor.replicas.supervised`) may also choose a group's GPUs by free memory."""
        if self.replicas <= 1:
            return (self,)
        port = self.router_metrics_port if self.router_metrics_port is not None else prometheus_port
        router = (router_spec(self, port),) if self.router_port is not None else ()
        return (*self.replica_specs(), *router)

    def with_flags(
        self, set_flags: Mapping[str, FlagValue] | None = None, unset: tuple[str, ...] | list[str] = ()
    ) -> InstanceSpec:
        """A copy with flags set and removed (the restart-with-new-flags path)."""
        flags = dict(self.flags)
        for name in unset:
            flags.pop(name, None)
        flags.update(set_flags or {})
        return replace(self, flags=_frozen(flags))

    def executable(self) -> list[str]:
        """The command prefix before the model: the layout's override, else vLLM's CLI or vtui's sim."""
        if self.command:
            return [os.path.expanduser(os.path.expandvars(part)) for part in self.command]
        if self.engine == "sim":
            return module_argv("vtui.sim")
        if self.engine == "router":
            return module_argv("vtui.supervisor.routerproc")
        return ["vllm", "serve"]

    def argv(self) -> list[str]:
        """The full command line. Secret flags (api-key) are left out: see `process_env`. A router takes
        no model: its flags are vllm-router's."""
        model = [] if self.engine == "router" else [self.model]
        args = [*self.executable(), *model, "--host", self.host, "--port", str(self.port)]
        for name, value in self.flags.items():
            if name in SECRET_FLAGS or name in ("host", "port", "model"):
                continue
            args.extend(flag_to_args(name, value))
        return args

    def process_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The child's environment: base + layout env + GPU pinning + secrets moved off the argv."""
        env = dict(os.environ if base is None else base)
        env.update(self.env)
        env.update(pinning_env(self.backend, self.gpus))
        for flag, var in SECRET_FLAGS.items():
            if flag in self.flags:
                value = self.flags[flag]
                env[var] = str(value[0]) if isinstance(value, list) else str(value)
        return env

    def command_line(self) -> str:
        """The exact command, shell-quoted, with the environment vtui adds (copyable)."""
        prefix = [f"{k}={v}" for k, v in pinning_env(self.backend, self.gpus).items()]
        prefix += [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        if any(f in self.flags for f in SECRET_FLAGS):
            prefix.append("VLLM_API_KEY=***")
        return " ".join(prefix + [shlex.quote(a) for a in self.argv()])


def flag_to_args(name: str, value: FlagValue) -> list[str]:
    """One layout flag as `vllm serve` arguments: True -> --x, False -> --no-x, list -> --x a b."""
    if value is True:
        return [f"--{name}"]
    if value is False:
        return [f"--no-{name}"]
    if isinstance(value, list):
        return [f"--{name}", *(str(v) for v in value)]
    return [f"--{name}", str(value)]


@dataclass(frozen=True)
class SessionSpec:
    name: str = "vtui"
    allow_gpu_sharing: bool = False  # let two instances list the same GPU (they start staggered)
    gpu_hour_price: float | None = None  # for cost per million tokens in bench reports
    gpu_memory_gib: float | None = None  # override when NVML is absent (planner, sim)
    on_event: tuple[str, ...] | None = None  # command run with each event's JSON on stdin (supervisor.notify)
    webhook: str | None = None  # URL each event's JSON is POSTed to (supervisor.notify)
    on_event_cooldown: float | None = None  # seconds between two events of one kind and instance (None: 60)
    metrics_port: int | None = (
        None  # the session supervisor's aggregated Prometheus /metrics (service.exporter)
    )
    metrics_host: str = "127.0.0.1"  # where that endpoint binds


# A value's place inside an instance or [defaults]: ("flags", "api-key"), or ("flags", "api-key", 1) for
# the second item of a list.
KeyPath = tuple[str | int, ...]
# Where a layout value came from a `${VAR}` reference: (instance name, or "" for [defaults], key path)
# -> (the expanded value, the text as written, e.g. "${VLLM_API_KEY}").
Templates = Mapping[tuple[str, KeyPath], tuple[str, str]]


@dataclass(frozen=True)
class Layout:
    session: SessionSpec
    instances: tuple[InstanceSpec, ...]
    path: Path | None = None
    defaults: Mapping[str, object] = field(default_factory=lambda: _frozen({}))
    # The `${VAR}` references its values were expanded from, carried with the layout so that saving it
    # writes them back (never the secret) and depends on nothing but the layout. Not part of equality.
    templates: Templates = field(default_factory=lambda: _frozen({}), compare=False, repr=False)
    # The file's text when it was read: a save merges what changed on disk since then instead of undoing
    # it (vtui.layouts.merge). None for a layout not read from a file. Not part of equality.
    origin: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "instances", tuple(self.instances))
        object.__setattr__(self, "defaults", _frozen(self.defaults))
        object.__setattr__(self, "templates", _frozen(self.templates))

    def instance(self, name: str) -> InstanceSpec:
        for spec in self.instances:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def names(self) -> list[str]:
        return [spec.name for spec in self.instances]

    def replace_instance(self, spec: InstanceSpec) -> Layout:
        return replace(self, instances=tuple(spec if s.name == spec.name else s for s in self.instances))


# vllm-router's health checker: every second, a worker failing 2 checks in a row leaves the rotation
# (vtui removes a dead replica itself within its 0.2 s tick; this is the router's own net)
HEALTH_INTERVAL_S = 1
ROUTER_POLICY = "round_robin"  # every READY replica gets its turn; the load shows in the fleet table
WORKER_STARTUP_TIMEOUT_S = 30  # /add_worker waits this long for the worker's /health (it is READY already)


def router_spec(entry: InstanceSpec, prometheus_port: int) -> InstanceSpec:
    """The vllm-router fronting `entry`'s replicas: NAME-router on `router_port`, the entry's restart
    policy, its own Prometheus port (the `vllm_router_*` series; its main port's /metrics forwards to
    one worker at a time)."""
    assert entry.router_port is not None
    return InstanceSpec(
        name=f"{entry.name}-router",
        model=entry.model,
        port=entry.router_port,
        engine="router",
        host=entry.host,
        restart=entry.restart,
        group=entry.name,
        flags={
            "policy": ROUTER_POLICY,
            "prometheus-host": "127.0.0.1",
            "prometheus-port": prometheus_port,
            "health-check-interval-secs": HEALTH_INTERVAL_S,
            "health-failure-threshold": 2,
            "health-success-threshold": 1,
            "worker-startup-timeout-secs": WORKER_STARTUP_TIMEOUT_S,
            "worker-startup-check-interval": 1,
            "log-level": "warning",
        },
    )
