"""The live side of a tune: `SupervisorRunner` puts a configuration in place through the session
supervisor (`/restart` with the flags that differ, then `/wait`, as `vtui restart` does), reads the
diagnosis of a start that failed from the instance's log, and measures it with one bench step after a
warm-up; `planner_predictor` scores a configuration from the plan before a restart is spent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from vtui.bench import BenchConfig, BenchResult, run_bench
from vtui.service.client import ServiceError, ServiceUnavailable
from vtui.tune.search import Measurement, Prediction, Predictor, StartFailed
from vtui.tune.space import Config

if TYPE_CHECKING:
    from vtui.planner import ModelConfig  # imported when a tune asks the planner

MASK = "***"  # how the supervisor shows a secret: never set, never unset by the tuner


class Client(Protocol):
    def get(self, target: str, *, timeout: float | None = ...) -> dict[str, Any]: ...

    def post(self, target: str, body: dict[str, Any], *, timeout: float | None = ...) -> dict[str, Any]: ...


def running_flags(client: Client, name: str) -> dict[str, object]:
    """The flags `name` runs with, as the supervisor knows them (secrets left out)."""
    inst = next(i for i in client.get("/status")["instances"] if i["name"] == name)
    return {k: v for k, v in (inst["spec"].get("flags") or {}).items() if v != MASK}


class SupervisorRunner:
    """Restarts one instance (only that one) with a configuration and load-tests it. `defaults` are the
    values vLLM takes for a flag left unset, so a configuration that only spells out a default is not
    restarted for."""

    def __init__(
        self,
        client: Client,
        name: str,
        bench: BenchConfig,
        *,
        defaults: Mapping[str, object],
        warmup_requests: int = 4,
        ready_timeout_s: float = 600.0,
    ) -> None:
        self.client = client
        self.name = name
        self.bench = bench
        self.defaults = dict(defaults)
        self.warmup_requests = warmup_requests
        self.ready_timeout_s = ready_timeout_s
        self.restarts = 0
        self.on_phase: Callable[[str], None] | None = None  # "restarting", "benchmarking"
        self.results: dict[Config, BenchResult] = {}  # the last bench of each configuration

    def effective(self, flags: Mapping[str, object]) -> dict[str, object]:
        return {**self.defaults, **{k: v for k, v in flags.items() if v != MASK}}

    def apply(self, flags: Mapping[str, object], *, exact: bool = False) -> None:
        """Make the instance run `flags` (a restart unless it already does). `exact`: also unset every
        flag not in `flags` (putting the original flags back). StartFailed when it does not get READY.
        The change is a delta on what runs: a restart still in flight when it was computed (Ctrl-C in the
        middle of a trial's) can land after it, so an exact apply looks again, and again, until it holds."""
        want = {k: v for k, v in flags.items() if v != MASK}
        for _ in range(3 if exact else 1):
            self._apply_once(want, exact)
            if not exact or running_flags(self.client, self.name) == want:
                return

    def _apply_once(self, want: dict[str, object], exact: bool) -> None:
        running = running_flags(self.client, self.name)
        state = next(i for i in self.client.get("/status")["instances"] if i["name"] == self.name)["state"]
        same = running == want if exact else self.effective(running) == self.effective(want)
        if same and state == "ready":
            return
        changes = {k: v for k, v in want.items() if running.get(k) != v}
        unset = [k for k in running if k not in want] if exact else []
        self.restarts += 1
        self._phase("restarting")
        try:
            self.client.post("/restart", {"name": self.name, "set": changes, "unset": unset}, timeout=None)
        except ServiceError as exc:
            if exc.status != 409:  # 409: refused before launch (the GPUs' free memory, a port): infeasible
                raise
            problems = [{"kind": "refused_before_launch", "message": p, "fix": None} for p in exc.problems]
            raise StartFailed(exc.problems[0], problems) from exc
        states = self.client.post(
            "/wait", {"names": [self.name], "timeout": self.ready_timeout_s}, timeout=None
        )
        if states["states"].get(self.name) != "ready":
            raise self._failure()

    def _failure(self) -> StartFailed:
        from vtui.telemetry.diagnosis import diagnose

        inst = next(i for i in self.client.get("/status")["instances"] if i["name"] == self.name)
        try:
            lines = self.client.get(f"/logs?name={self.name}&n=400").get("lines") or []
        except (ServiceError, ServiceUnavailable, OSError):  # no log to read: the failure is named without
            lines = []
        problems = [p.to_json() for p in diagnose(lines, instance=self.name)]
        message = inst.get("last_error") or (problems[0]["message"] if problems else inst["state"])
        return StartFailed(str(message), problems)

    def _phase(self, phase: str) -> None:
        if self.on_phase is not None:
            self.on_phase(phase)

    def measure(self, config: Config) -> Measurement:
        self.apply(config.flags)
        self._phase("benchmarking")
        bench = replace(self.bench, warmup_requests=self.warmup_requests)
        result = asyncio.run(run_bench(bench))
        self.results[config] = result
        return measurement_of(result)


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
