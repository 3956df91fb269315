"""The search logic against a fake trial runner (a formula, no processes): it climbs to the SLO-feasible
optimum, prunes what the planner rules out without a restart, learns from a failure to start, and
spends fewer trials than the grid."""

from __future__ import annotations

import itertools

import pytest

from vtui.tune import (
    Config,
    Measurement,
    Objective,
    Prediction,
    Search,
    StartFailed,
    Trial,
    build_space,
    start_config,
)
from vtui.tune.space import MAX_UTILIZATION

DEFAULTS = {
    "max-num-seqs": 8,
    "max-num-batched-tokens": 2048,
    "gpu-memory-utilization": 0.9,
    "enable-chunked-prefill": True,
    "enable-prefix-caching": True,
    "max-model-len": 4096,
}


class FakeRunner:
    """Throughput rises with max-num-seqs up to 32, TTFT p95 rises with max-num-batched-tokens; a
    utilization above `oom_above` fails to start."""

    def __init__(self, oom_above: float = 1.0) -> None:
        self.restarts = 0
        self.measured: list[Config] = []
        self.oom_above = oom_above

    def measure(self, config: Config) -> Measurement:
        self.restarts += 1
        self.measured.append(config)
        f = config.flags
        if f["gpu-memory-utilization"] > self.oom_above:
            raise StartFailed(
                "CUDA out of memory", [{"kind": "oom", "message": "CUDA out of memory", "fix": None}]
            )
        seqs, tokens = f["max-num-seqs"], f["max-num-batched-tokens"]
        rps = min(seqs, 32) * (1.0 if f["enable-chunked-prefill"] else 0.8) + tokens / 4096
        ttft = 50 + tokens / 20 + (0 if seqs >= 32 else 200)
        return Measurement(rps, rps * 16, ttft, 5.0, 32, 0, kv_peak=0.5, waiting_peak=0, preemptions=0)


def make(runner, objective, predictor=lambda c: Prediction(), max_trials=40, **space_kw):
    space = build_space(DEFAULTS, required_context=2048, model_max_len=4096, concurrency=32, **space_kw)
    return Search(space, start_config(DEFAULTS, space, DEFAULTS), runner, objective, predictor, max_trials)


def grid_best(search: Search) -> float:
    runner = FakeRunner()
    space = search.space
    best = 0.0
    for values in itertools.product(*(space.values[d] for d in space.dims())):
        config = search.start.with_(**dict(zip(space.dims(), values, strict=True)))
        if config.get("enable-chunked-prefill") is False and config.get(
            "max-num-batched-tokens"
        ) < config.get("max-model-len"):
            continue
        m = runner.measure(config)
        if search.objective.ttft_p95_ms is None or m.ttft_p95_ms <= search.objective.ttft_p95_ms:
            best = max(best, m.req_per_s)
    return best


def test_finds_the_slo_optimum_with_few_trials():
    runner = FakeRunner()
    search = make(runner, Objective(ttft_p95_ms=200))
    result = search.run()
    assert result.best.result.ttft_p95_ms <= 200
    assert result.best.result.req_per_s >= 0.95 * grid_best(search)
    assert result.best.result.req_per_s > result.baseline.result.req_per_s
    assert result.launched < search.space.size() / 3
    assert result.restarts == runner.restarts


def test_the_space_is_bounded():
    space = build_space(
        {**DEFAULTS, "gpu-memory-utilization": 0.99},
        required_context=3000,
        model_max_len=4096,
        concurrency=32,
    )
    assert max(space.values["gpu-memory-utilization"]) <= MAX_UTILIZATION
    assert min(space.values["max-model-len"]) >= 3000
    assert "kv-cache-dtype" not in space.values
    assert (
        "fp8"
        in build_space(
            DEFAULTS, required_context=2048, model_max_len=4096, concurrency=32, allow_quality_trade=True
        ).values["kv-cache-dtype"]
    )


def test_planner_prunes_without_a_restart():
    runner = FakeRunner()

    def predictor(config: Config) -> Prediction:
        # the KV cache holds 20 of the workload's requests
        return Prediction(fits=True, workload_concurrency=20.0)

    result = make(runner, Objective(ttft_p95_ms=200), predictor).run()
    pruned = [t for t in result.trials if not t.launched and "far below max-num-seqs" in t.infeasible]
    assert pruned and all(t.config.get("max-num-seqs") > 80 for t in pruned)
    assert all(c.get("max-num-seqs") <= 80 for c in runner.measured)
    assert result.restarts == runner.restarts == sum(1 + len(t.repeats) for t in result.trials if t.launched)


def test_a_config_that_does_not_fit_is_scored_from_the_plan():
    runner = FakeRunner()
    predictor = lambda c: Prediction(fits=c.get("gpu-memory-utilization") >= 0.85)  # noqa: E731
    search = make(runner, Objective(ttft_p95_ms=200), predictor)
    trial = search.evaluate(search.start.with_(gpu_memory_utilization=0.8), "fit")
    assert not trial.launched and "cannot hold one request" in trial.infeasible
    assert runner.restarts == 0


def test_failure_to_start_is_recorded_and_rules_out_the_failing_direction():
    runner = FakeRunner(oom_above=0.9)
    search = make(runner, Objective(ttft_p95_ms=200))
    failed = search.evaluate(search.start.with_(gpu_memory_utilization=0.92), "fit")
    assert (
        failed.launched
        and failed.infeasible.startswith("failed to start")
        and failed.diagnosis[0]["kind"] == "oom"
    )
    beyond = search.evaluate(search.start.with_(gpu_memory_utilization=0.95), "fit")
    assert not beyond.launched and "failed to start" in beyond.infeasible
    assert runner.restarts == 1
    below = search.evaluate(search.start.with_(gpu_memory_utilization=0.85), "fit")
    assert below.launched and below.measurement is not None


def test_trial_budget_is_kept():
    runner = FakeRunner()
    result = make(runner, Objective(ttft_p95_ms=200), max_trials=5).run()
    assert len(set(runner.measured)) <= 5 and result.stopped  # configurations launched
    assert sum(1 for t in result.trials if t.launched) <= 5


def test_a_failing_baseline_is_an_error():
    with pytest.raises(StartFailed):
        make(FakeRunner(oom_above=0.5), Objective()).run()


class DiesAfter(FakeRunner):
    """A runner whose process is killed (as by kill -9) before its n+1-th measurement."""

    def __init__(self, n: int, **kw) -> None:
        super().__init__(**kw)
        self.n = n

    def measure(self, config: Config) -> Measurement:
        if len(self.measured) >= self.n:
            raise SystemExit("killed")
        return super().measure(config)


def test_a_resumed_search_replays_its_record_and_ends_where_an_unbroken_one_does():
    from vtui.tune import progress

    objective = Objective(ttft_p95_ms=200)
    whole = FakeRunner(oom_above=0.9)
    unbroken = make(whole, objective).run()
    dying = make(DiesAfter(12, oom_above=0.9), objective)
    recorded: list[dict] = []
    dying.on_trial = lambda t: recorded.append(progress.trial_json(t, dying.start, objective))
    with pytest.raises(SystemExit):
        dying.run()
    runs = sum(max(1, t["measurements"]) for t in recorded if t["launched"])  # a failure: one outcome
    assert len([t for t in recorded if t["launched"]]) >= 4 and runs <= 12
    fresh = FakeRunner(oom_above=0.9)
    replay = progress.ReplayRunner(fresh, progress.recorded_outcomes(recorded), restarts=6)
    resumed = make(replay, objective).run()
    assert replay.replayed == runs and replay.restarts == 6 + fresh.restarts
    assert fresh.measured == whole.measured[runs:]  # the recorded runs are not run again
    assert [t.config for t in resumed.trials] == [t.config for t in unbroken.trials]
    assert resumed.best.config == unbroken.best.config


def test_a_recorded_failure_to_start_replays_as_one():
    from vtui.tune import progress

    objective = Objective(ttft_p95_ms=200)
    search = make(FakeRunner(oom_above=0.9), objective)
    failed = search.evaluate(search.start.with_(gpu_memory_utilization=0.92), "fit")
    record = progress.recorded_outcomes([progress.trial_json(failed, search.start, objective)])
    again = make(progress.ReplayRunner(FakeRunner(), record), objective)
    trial = again.evaluate(again.start.with_(gpu_memory_utilization=0.92), "fit")
    assert trial.infeasible == failed.infeasible and trial.diagnosis == failed.diagnosis


def test_the_pareto_front():
    from vtui.tune.search import pareto_front

    points = [(50.0, 10.0), (40.0, 12.0), (60.0, 20.0), (70.0, 15.0), (30.0, 5.0), (60.0, 19.0)]
    assert pareto_front(points) == [(30.0, 5.0), (40.0, 12.0), (60.0, 20.0)]


def test_the_re_measure_starts_with_the_configuration_already_running():
    runner = FakeRunner()
    search = make(runner, Objective(ttft_p95_ms=None))
    best, second = (search.start.with_(**{"max-num-seqs": n}) for n in (32, 16))
    for config in (best, second):  # the second leader was measured last: the instance runs it now
        search._record(
            Trial(len(search.trials), config, "concurrency", True, measurement=runner.measure(config))
        )
    runner.measured.clear()
    winner = search._remeasure(search._by_config[best])
    assert runner.measured == [second, best]  # no restart for the first re-measure
    assert winner.config == best and all(len(t.repeats) == 1 for t in search.trials)


def test_each_launched_configuration_is_measured_two_or_three_times():
    runner = FakeRunner()
    result = make(runner, Objective(ttft_p95_ms=200)).run()
    counts = [len(t.runs) for t in result.trials if t.launched and t.measurement is not None]
    assert counts and all(n >= 2 for n in counts)
    assert len(result.baseline.runs) >= 3  # the baseline's spread: no incumbent to stop early against
