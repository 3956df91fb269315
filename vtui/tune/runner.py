"""The live side of a tune: `TrialRunner` puts a configuration in place through an `InstanceOps` (the
session supervisor's own `Supervisor.restart`, with fallback, in a tune job: `service.tuning`; or its
socket, `ClientOps`, for benchmarks that drive a supervisor from outside), reads the diagnosis of a
start that failed, and measures it with one bench step after a warm-up; `planner_predictor` scores a
configuration from the plan before a restart is spent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from vtui.bench import BenchConfig, BenchResult, run_bench
from vtui.tune.search import Measurement, Prediction, Predictor, StartFailed
from vtui.tune.space import Config

if TYPE_CHECKING:
    from vtui.planner import ModelConfig  # imported when a tune asks the planner

from vtui.core.masking import MASK  # how the supervisor shows a secret: never set, never unset by the tuner


class TuneCancelled(Exception):
    """The tune was asked to stop (`POST /tune/cancel`): its restore runs next."""


class InstanceStopped(Exception):
    """Someone stopped the instance during the tune: it is not started again by the tuner."""


class InstanceOps(Protocol):
    """What a tune asks of the instance it tunes (one instance, only that one)."""

    def running(self) -> tuple[dict[str, object], str]:
        """Its flags (secrets left out) and its state's word ("ready", "stopped", …)."""
        ...

    def restart(self, changes: Mapping[str, object], unset: list[str], label: str) -> None:
        """Restart with these flags set and unset, through the instance's operation queue, and wait
        for READY. StartFailed (with the diagnosis) when the flags did not get there (the instance is
        back on the flags before where it could), InstanceStopped when a stop came first."""
        ...


class Client(Protocol):
    def get(self, target: str, *, timeout: float | None = ...) -> dict[str, Any]: ...

    def post(self, target: str, body: dict[str, Any], *, timeout: float | None = ...) -> dict[str, Any]: ...


class ClientOps:
    """`InstanceOps` through the session supervisor's socket (`/restart` with fallback, `/wait`), for a
    search driven from outside the supervisor (benchmarks/bench_tune.py)."""

    def __init__(self, client: Client, name: str, ready_timeout_s: float = 600.0) -> None:
        self.client, self.name, self.ready_timeout_s = client, name, ready_timeout_s

    def _status(self) -> dict[str, Any]:
        return next(i for i in self.client.get("/status")["instances"] if i["name"] == self.name)

    def running(self) -> tuple[dict[str, object], str]:
        inst = self._status()
        flags = {k: v for k, v in (inst["spec"].get("flags") or {}).items() if v != MASK}
        return flags, str(inst["state"])

    def restart(self, changes: Mapping[str, object], unset: list[str], label: str) -> None:
        body = {"name": self.name, "set": dict(changes), "unset": unset, "label": label, "fallback": True}
        try:
            self.client.post("/restart", body, timeout=None)
        except Exception as exc:
            if getattr(exc, "status", None) != 409:
                raise
            problems = [str(p) for p in getattr(exc, "problems", None) or [str(exc)]]
            raise StartFailed(problems[0], self._diagnosis(problems[0])) from exc
        states = self.client.post(
            "/wait", {"names": [self.name], "timeout": self.ready_timeout_s}, timeout=None
        )
        if states["states"].get(self.name) != "ready":
            inst = self._status()
            message = str(inst.get("last_error") or inst["state"])
            raise StartFailed(message, self._diagnosis(message))

    def _diagnosis(self, message: str) -> list[dict[str, object]]:
        from vtui.telemetry.diagnosis import diagnose

        try:
            lines = self.client.get(f"/logs?name={self.name}&n=400").get("lines") or []
        except Exception:  # noqa: BLE001 — the client's errors (see restart): no log to read, the message alone
            lines = []
        found = [p.to_json() for p in diagnose(lines, instance=self.name)]
        return found or [{"kind": "start_failed", "message": message, "fix": None}]


def running_flags(client: Client, name: str) -> dict[str, object]:
    """The flags `name` runs with, as the supervisor shows them (secrets left out)."""
    return ClientOps(client, name).running()[0]


class TrialRunner:
    """Restarts one instance (only that one) with a configuration and load-tests it. `defaults` are the
    values vLLM takes for a flag left unset, so a configuration that only spells out a default is not
    restarted for. `cancelled`: asked before each restart and bench step (TuneCancelled)."""

    def __init__(
        self,
        ops: InstanceOps,
        bench: BenchConfig,
        *,
        defaults: Mapping[str, object],
        warmup_requests: int = 4,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        self.ops = ops
        self.bench = bench
        self.defaults = dict(defaults)
        self.warmup_requests = warmup_requests
        self.cancelled = cancelled
        self.restarts = 0
        self.on_phase: Callable[[str], None] | None = None  # "restarting", "benchmarking"
        self.results: dict[Config, BenchResult] = {}  # the last bench of each configuration

    def effective(self, flags: Mapping[str, object]) -> dict[str, object]:
        return {**self.defaults, **{k: v for k, v in flags.items() if v != MASK}}

    def apply(self, flags: Mapping[str, object], *, exact: bool = False, label: str = "tune trial") -> None:
        """Make the instance run `flags` (a restart unless it already does). `exact`: also unset every
        flag not in `flags` (putting the original flags back). StartFailed when it does not get READY,
        InstanceStopped when it was stopped by someone else (never started again here)."""
        want = {k: v for k, v in flags.items() if v != MASK}
        running, state = self.ops.running()
        if state in ("stopped", "stopping"):
            raise InstanceStopped(f"{state} during the tune")
        same = running == want if exact else self.effective(running) == self.effective(want)
        if same and state == "ready":
            return
        changes = {k: v for k, v in want.items() if running.get(k) != v}
        unset = [k for k in running if k not in want] if exact else []
        self.restarts += 1
        self._phase("restarting")
        self.ops.restart(changes, unset, label)

    def _phase(self, phase: str) -> None:
        if self.on_phase is not None:
            self.on_phase(phase)

    def measure(self, config: Config) -> Measurement:
        if self.cancelled():
            raise TuneCancelled("cancelled")
        self.apply(config.flags)
        if self.cancelled():
            raise TuneCancelled("cancelled")
        self._phase("benchmarking")
        bench = replace(self.bench, warmup_requests=self.warmup_requests)
        result = asyncio.run(run_bench(bench))
        self.results[config] = result
        return measurement_of(result)


class SupervisorRunner(TrialRunner):
    """A TrialRunner through the supervisor's socket (benchmarks)."""

    def __init__(
        self, client: Client, name: str, bench: BenchConfig, *, ready_timeout_s: float = 600.0, **kw: Any
    ) -> None:
        super().__init__(ClientOps(client, name, ready_timeout_s), bench, **kw)


def measurement_of(result: BenchResult) -> Measurement:
    step = result.steps[0]

    def ms(value: float | None) -> float | None:
        return None if value is None else value * 1000.0

    return Measurement(
        req_per_s=step.req_per_s,
        output_tok_per_s=step.output_tok_per_s,
        ttft_p95_ms=ms(step.ttft.p95),
        itl_p95_ms=ms(step.itl.p95),
        requests=step.requests,
        failed=step.failed,
        kv_peak=step.server.kv_usage_peak,
        waiting_peak=step.server.waiting_peak,
        preemptions=step.server.preemptions,
    )


def model_config(engine: str, model: str, sim_params: str | None = None) -> ModelConfig | None:
    """The model's shape for the planner: config.json on disk, else (sim engine) the sim's table."""
    from vtui.planner import model_config_for

    return model_config_for(engine, model, sim_params)[0]


def planner_predictor(
    model_cfg: ModelConfig | None,
    gpu_memory_gib: float | None,
    workload_tokens: int,
    *,
    device: str = "cuda",
    calibration: float = 1.0,
) -> Predictor:
    """A Predictor from the planner: whether one request at max-model-len fits, and how many of the
    workload's requests the KV cache holds (× `calibration`: the running instance's logged KV tokens
    over the plan's for its flags, so the estimate of memory overheads does not decide alone)."""
    from vtui.planner import params_from_flags, plan

    def predict(config: Config) -> Prediction:
        if model_cfg is None:
            return Prediction()
        try:
            p = plan(model_cfg, params_from_flags(config.flags, gpu_memory_gib, device=device))
        except (ValueError, ZeroDivisionError):
            return Prediction()
        tokens = None if p.kv_cache_tokens is None else int(p.kv_cache_tokens * calibration)
        held = tokens / workload_tokens if tokens is not None and workload_tokens > 0 else None
        return Prediction(
            fits=p.max_model_len_fits if tokens is None else tokens >= p.max_model_len,
            kv_cache_tokens=tokens,
            max_concurrency=p.max_concurrency,
            workload_concurrency=held,
            warnings=p.warnings,
        )

    return predict
