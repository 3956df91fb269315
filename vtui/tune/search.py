"""The tuner's method, a structured search in the seeds' order: fit (utilization, context, KV format) ->
concurrency (max-num-seqs) -> latency (max-num-batched-tokens, chunked prefill) -> refine (one step
either side of the leader on every flag, prefix caching), then the two leaders measured again so noise
cannot pick the winner. Each dimension is a hill climb from the leader; a move is taken only when it
gains more than the noise margin and beyond the runs' noise.

The noise rule: each launched configuration is measured `min_runs` times (3), or only twice when the
difference from the incumbent is already clear; a challenger beats the incumbent only when Welch's 95 %
confidence interval of the difference of their per-run scores lies above 0 (`bench.stats.welch`) and
the mean gain passes NOISE_MARGIN. At the end the best is compared so with the baseline: a best within
noise of it is not applied (`TuneResult.verdict` says so, with the interval).

Before a restart is spent the planner rules a configuration out (`Predictor`): one whose KV cache
cannot hold one request at max-model-len, or holds far fewer of the workload's requests than
max-num-seqs, is scored from the plan and not launched. A configuration that fails to start is
infeasible with its diagnosis, and its neighbours in the failing direction (MONOTONE_FAILING_UP) are
skipped. Pure logic: the trial runner and the predictor are given (`TrialRunner`, `Predictor`), so the
search is tested without processes.

Why not an optimisation library: benchmarks/bench_tune.py runs Optuna's TPE sampler with the SLO as a
constraint on the same space and the same launched-trial budget; it reached 0.87-0.90 of the grid's
confirmed goodput where this search reached 0.98. TPE spends its first trials at random and learns
nothing from the seeds' order, the planner or the KV figures beside each result, which is what a budget
of a dozen restarts needs; so vtui depends on no optimiser."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from vtui.bench.stats import Difference, Spread, spread, welch
from vtui.tune.space import MONOTONE_FAILING_UP, Config, Space

Metric = Literal["rps", "tok"]
NOISE_MARGIN = 0.05  # a move must gain more than this (relative goodput) to be taken
MIN_RUNS = 3  # bench runs of each launched configuration (2 when the difference is clear by then)
KV_FULL = 0.9  # a KV peak from here on counts as the cache running short
PATIENCE = 2  # launched trials in a row without a gain before a direction is given up
FAR_BELOW = 0.25  # KV holding fewer than this × max-num-seqs of the workload's requests: not launched


@dataclass(frozen=True)
class Objective:
    ttft_p95_ms: float | None = None
    itl_p95_ms: float | None = None
    metric: Metric = "rps"
    max_error_rate: float = 0.0


@dataclass(frozen=True)
class Measurement:
    """One bench step against one configuration, with the server's side beside it."""

    req_per_s: float
    output_tok_per_s: float
    ttft_p95_ms: float | None
    itl_p95_ms: float | None
    requests: int
    failed: int
    kv_peak: float | None = None
    waiting_peak: float | None = None
    preemptions: float | None = None

    @property
    def error_rate(self) -> float:
        return self.failed / self.requests if self.requests else 1.0

    def to_json(self) -> dict[str, object]:
        return {
            "req_per_s": round(self.req_per_s, 4),
            "output_tok_per_s": round(self.output_tok_per_s, 2),
            "ttft_p95_ms": _r(self.ttft_p95_ms),
            "itl_p95_ms": _r(self.itl_p95_ms),
            "requests": self.requests,
            "failed": self.failed,
            "kv_peak": self.kv_peak,
            "waiting_peak": self.waiting_peak,
            "preemptions": self.preemptions,
        }


def merge(measurements: Sequence[Measurement]) -> Measurement:
    """Repeated measurements of one configuration: mean throughput, worst p95s, summed counts."""

    def worst(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    n = len(measurements)
    return Measurement(
        req_per_s=sum(m.req_per_s for m in measurements) / n,
        output_tok_per_s=sum(m.output_tok_per_s for m in measurements) / n,
        ttft_p95_ms=worst([m.ttft_p95_ms for m in measurements]),
        itl_p95_ms=worst([m.itl_p95_ms for m in measurements]),
        requests=sum(m.requests for m in measurements),
        failed=sum(m.failed for m in measurements),
        kv_peak=worst([m.kv_peak for m in measurements]),
        waiting_peak=worst([m.waiting_peak for m in measurements]),
        preemptions=worst([m.preemptions for m in measurements]),
    )


@dataclass(frozen=True)
class Prediction:
    """The planner's view of a configuration (None fields: unknown)."""

    fits: bool | None = None  # one request at max-model-len fits the KV cache
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None  # requests of max-model-len the KV cache holds
    workload_concurrency: float | None = None  # requests of the workload's length it holds
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "fits": self.fits,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "workload_concurrency": _r(self.workload_concurrency),
        }


class StartFailed(Exception):
    """The configuration did not reach READY; `problems` are its diagnosis ({kind, message, fix})."""

    def __init__(self, message: str, problems: Sequence[Mapping[str, object]] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.problems = [dict(p) for p in problems]


class TrialRunner(Protocol):
    """Puts a configuration in place (a restart unless it already runs) and measures it."""

    @property
    def restarts(self) -> int: ...

    def measure(self, config: Config) -> Measurement: ...


Predictor = Callable[[Config], Prediction]


@dataclass(frozen=True)
class Trial:
    index: int
    config: Config
    stage: str
    launched: bool  # False: scored from the plan (or ruled out by an earlier failure), no restart
    prediction: Prediction | None = None
    measurement: Measurement | None = None
    repeats: tuple[Measurement, ...] = ()
    infeasible: str | None = None  # why it cannot run / was not run
    diagnosis: tuple[dict[str, object], ...] = ()

    @property
    def result(self) -> Measurement | None:
        return merge((self.measurement, *self.repeats)) if self.measurement is not None else None

    @property
    def runs(self) -> tuple[Measurement, ...]:
        return (self.measurement, *self.repeats) if self.measurement is not None else ()

    def spread(self, objective: Objective) -> Spread | None:
        """The goodput of its runs: mean, standard deviation, range."""
        runs = self.runs
        return spread([goodput(m, objective) for m in runs]) if runs else None


def goodput(m: Measurement, objective: Objective) -> float:
    return m.req_per_s if objective.metric == "rps" else m.output_tok_per_s


def meets_slo(m: Measurement | None, objective: Objective) -> bool:
    if m is None or m.requests == 0 or m.error_rate > objective.max_error_rate:
        return False
    for value, limit in ((m.ttft_p95_ms, objective.ttft_p95_ms), (m.itl_p95_ms, objective.itl_p95_ms)):
        if limit is not None and (value is None or value > limit):
            return False
    return True


def score(m: Measurement | None, objective: Objective) -> float:
    """Higher is better: the goodput when the SLOs hold; otherwise minus how far past them (so the
    search can still climb towards them); errors and no result at the bottom."""
    if m is None or m.requests == 0:
        return -math.inf
    if m.error_rate > objective.max_error_rate:
        return -1e6 - m.error_rate
    if meets_slo(m, objective):
        return goodput(m, objective)
    excess = 0.0
    for value, limit in ((m.ttft_p95_ms, objective.ttft_p95_ms), (m.itl_p95_ms, objective.itl_p95_ms)):
        if limit is not None:
            excess = max(excess, (value if value is not None else math.inf) / limit - 1.0)
    return -excess


def run_scores(trial: Trial, objective: Objective) -> list[float]:
    """The score of each of a trial's runs (the noise rule's samples)."""
    return [score(m, objective) for m in trial.runs]


@dataclass
class TuneResult:
    baseline: Trial
    best: Trial
    trials: list[Trial]
    restarts: int
    stopped: str | None = None  # why the search ended early (trial budget)
    apply: bool = True  # False: the best is within noise of the baseline (or is the baseline)
    verdict: str = ""  # one line: what was found and whether it is applied, and why
    difference: Difference | None = None  # best minus baseline, per-run scores (Welch, 95 %)

    @property
    def launched(self) -> int:
        return sum(1 for t in self.trials if t.launched)


@dataclass
class Search:
    space: Space
    start: Config
    runner: TrialRunner
    objective: Objective
    predictor: Predictor = field(default=lambda c: Prediction())
    max_trials: int = 24  # launched configurations (restarts), the baseline included
    min_runs: int = MIN_RUNS  # bench runs of each launched configuration (noise rule)
    workload_tokens: int = 0  # input + output of one request (the planner's unit for workload concurrency)
    on_trial: Callable[[Trial], None] | None = None
    on_start: Callable[[Config, str, int], None] | None = (
        None  # a trial is about to be run (config, stage, index)
    )
    trials: list[Trial] = field(default_factory=list)
    _by_config: dict[Config, Trial] = field(default_factory=dict)
    _failed: list[Config] = field(default_factory=list)
    _stopped: str | None = None

    # -- one configuration -------------------------------------------------------------------------
    def _record(self, trial: Trial) -> Trial:
        self.trials.append(trial)
        self._by_config[trial.config] = trial
        if self.on_trial is not None:
            self.on_trial(trial)
        return trial

    def _launched(self) -> int:
        return sum(1 for t in self.trials if t.launched)

    def ruled_out_by_failure(self, config: Config) -> Config | None:
        """A failed configuration that `config` lies beyond in the failing direction: equal on every
        other flag, at or above it on each of MONOTONE_FAILING_UP."""
        mine = config.flags
        for failed in self._failed:
            theirs = failed.flags
            if all(
                mine.get(k) == theirs.get(k) for k in set(mine) | set(theirs) if k not in MONOTONE_FAILING_UP
            ) and all(_ge(mine.get(k), theirs.get(k)) for k in MONOTONE_FAILING_UP):
                return failed
        return None

    def plan_problem(self, config: Config, pred: Prediction) -> str | None:
        """Why the plan says not to launch `config`, or None."""
        flags = config.flags
        if flags.get("enable-chunked-prefill") is False:
            tokens, length = flags.get("max-num-batched-tokens"), flags.get("max-model-len")
            if isinstance(tokens, int) and isinstance(length, int) and tokens < length:
                return (
                    f"max-num-batched-tokens {tokens} < max-model-len {length} with chunked prefill off: "
                    "vLLM refuses to start"
                )
        if pred.fits is False:
            return "the KV cache cannot hold one request at max-model-len (planner)"
        seqs = flags.get("max-num-seqs")
        held = pred.workload_concurrency
        if isinstance(seqs, int) and held is not None and held < FAR_BELOW * seqs:
            return (
                f"the KV cache holds about {held:.0f} of the workload's requests, far below "
                f"max-num-seqs {seqs} (planner)"
            )
        return None

    def evaluate(self, config: Config, stage: str, against: Trial | None = None) -> Trial | None:
        """The trial of `config`: cached, ruled out, scored from the plan, or launched and measured
        `min_runs` times (two when its difference from `against`, the incumbent, is clear by then).
        None when the trial budget is spent."""
        if config in self._by_config:
            return self._by_config[config]
        index = len(self.trials)
        failed = self.ruled_out_by_failure(config)
        if failed is not None:
            why = f"skipped: beyond {_label(failed, self.start)}, which failed to start"
            return self._record(Trial(index, config, stage, False, infeasible=why))
        pred = self.predictor(config)
        problem = self.plan_problem(config, pred) if config != self.start else None  # it runs already
        if problem is not None:
            return self._record(Trial(index, config, stage, False, prediction=pred, infeasible=problem))
        if self._launched() >= self.max_trials:
            self._stopped = f"stopped at the trial budget ({self.max_trials} launched)"
            return None
        if self.on_start is not None:
            self.on_start(config, stage, index)
        try:
            measured = self.runner.measure(config)
        except StartFailed as exc:
            self._failed.append(config)
            return self._record(
                Trial(
                    index,
                    config,
                    stage,
                    True,
                    prediction=pred,
                    infeasible=f"failed to start: {exc.message}",
                    diagnosis=tuple(exc.problems),
                )
            )
        trial = Trial(index, config, stage, True, prediction=pred, measurement=measured)
        while len(trial.runs) < self.min_runs:
            if against is not None and len(trial.runs) >= 2:
                diff = self.difference(trial, against)
                if diff is not None and diff.clear:
                    break  # clearly better or clearly worse already: the third run decides nothing
            try:
                again = self.runner.measure(config)
            except StartFailed:  # it went down between runs: judged on the runs it gave
                break
            trial = replace(trial, repeats=(*trial.repeats, again))
        return self._record(trial)

    def value(self, trial: Trial | None) -> float:
        return score(trial.result, self.objective) if trial is not None else -math.inf

    def difference(self, a: Trial, b: Trial) -> Difference | None:
        """Welch's interval of a's per-run scores minus b's (None: either has fewer than 2 runs)."""
        return welch(run_scores(a, self.objective), run_scores(b, self.objective))

    def better(self, challenger: Trial | None, leader: Trial) -> bool:
        """The challenger gains more than NOISE_MARGIN on the merged figures and, where both have runs
        enough to show their spread, beyond it (the interval of the difference lies above 0)."""
        a, b = self.value(challenger), self.value(leader)
        if a == -math.inf or challenger is None:
            return False
        if a > 0 and b > 0:
            gains = a > b * (1 + NOISE_MARGIN)
        else:
            gains = a > b + (NOISE_MARGIN if b <= 0 < a or a <= 0 else 0)
        if not gains:
            return False
        diff = self.difference(challenger, leader)
        return diff is None or diff.low > 0

    # -- the method ----------------------------------------------------------------------------------
    def climb(self, leader: Trial, dim: str, stage: str) -> Trial:
        """Hill climb along one flag from the leader: walk each way along its ladder until PATIENCE
        launched trials in a row gain nothing (a plateau is crossed, not stopped at), move to the best
        value found, and go on from there until neither way gains."""
        ladder = list(self.space.values.get(dim, ()))
        while True:
            current = leader.config.get(dim)
            if current not in ladder:
                return leader
            best = leader
            for step in (1, -1):
                stale, i = 0, ladder.index(current) + step
                while 0 <= i < len(ladder) and stale < PATIENCE:
                    trial = self.evaluate(leader.config.with_(**{dim: ladder[i]}), stage, against=best)
                    if trial is None:
                        return best
                    if self.better(trial, best):
                        best, stale = trial, 0
                    elif trial.launched:
                        stale += 1
                    i += step
            if best is leader:
                return leader
            leader = best

    def run(self) -> TuneResult:
        baseline = self.evaluate(self.start, "baseline")
        if baseline is None or baseline.measurement is None:
            why = baseline.infeasible if baseline is not None else "no trial budget"
            raise StartFailed(f"the starting flags could not be measured: {why}")
        leader = baseline
        dims = self.space.dims()
        stages = (
            ("fit", [d for d in ("gpu-memory-utilization", "max-model-len", "kv-cache-dtype") if d in dims]),
            ("concurrency", [d for d in ("max-num-seqs",) if d in dims]),
            ("latency", [d for d in ("max-num-batched-tokens", "enable-chunked-prefill") if d in dims]),
        )
        for stage, stage_dims in stages:
            for dim in stage_dims:
                if stage == "fit" and not self._kv_short(leader):
                    break  # the KV cache is not what holds this workload back: spend no restart on it
                leader = self.climb(leader, dim, stage)
        # refine: every flag once more from the leader (prefix caching too), until a pass changes nothing
        for _ in range(2):
            before = leader
            for dim in dims:
                leader = self.climb(leader, dim, "refine")
            if leader is before or self._stopped:
                break
        best = self._remeasure(leader)
        baseline = self._by_config[self.start]
        result = TuneResult(
            baseline=baseline,
            best=best,
            trials=self.trials,
            restarts=self.runner.restarts,
            stopped=self._stopped,
        )
        self._judge(result)
        return result

    def _judge(self, result: TuneResult) -> None:
        """Whether the best is worth applying: it must beat the baseline by the noise rule (`better`)."""
        best, baseline = result.best, result.baseline
        result.difference = self.difference(best, baseline) if best is not baseline else None
        sb, sl = baseline.spread(self.objective), best.spread(self.objective)
        unit = "req/s" if self.objective.metric == "rps" else "tok/s"

        def shown(s: Spread | None) -> str:
            return "--" if s is None else f"{s.mean:.2f} ± {s.stdev:.2f} {unit} (n={s.n})"

        if best.config == baseline.config:
            result.apply = False
            result.verdict = f"no configuration beat the starting flags ({shown(sb)}): they stay"
            return
        d = result.difference
        interval = f"; difference {d.delta:+.2f}, 95 % CI [{d.low:+.2f}, {d.high:+.2f}]" if d else ""
        if self.better(best, baseline):
            result.verdict = f"best {shown(sl)} beats the baseline {shown(sb)}{interval}: applied"
        else:
            result.apply = False
            result.verdict = (
                f"best {shown(sl)} is within noise of the baseline {shown(sb)}{interval}: "
                "not applied, the starting flags stay"
            )

    def _kv_short(self, leader: Trial) -> bool:
        """The seeds' fit step matters when the KV cache is what limits: preemptions or a nearly full
        cache at the leader (requests waiting with the cache half empty wait for max-num-seqs instead)."""
        m = leader.measurement
        if m is None:
            return True
        return bool(m.preemptions) or (m.kv_peak or 0) >= KV_FULL

    def _remeasure(self, leader: Trial) -> Trial:
        """Measure the two leading configurations again; the winner is the better on the merged
        figures (a lucky first run cannot pick it alone)."""
        measured = [t for t in self.trials if t.launched and t.measurement is not None]
        top = sorted(measured, key=self.value, reverse=True)[:2]
        if leader not in top:
            top = [leader, *top][:2]
        # the one the instance runs now first: its re-measure needs no restart (on a GPU box, minutes)
        running = next((t.config for t in reversed(self.trials) if t.launched), None)
        top.sort(key=lambda t: t.config != running)
        for trial in top:
            if self.on_start is not None:
                self.on_start(trial.config, "re-measure", trial.index)
            try:
                again = self.runner.measure(trial.config)
            except StartFailed:
                continue
            updated = replace(trial, repeats=(*trial.repeats, again))
            self.trials[self.trials.index(trial)] = updated
            self._by_config[trial.config] = updated
        finalists = [self._by_config[t.config] for t in top]
        return max(finalists, key=self.value)


def _ge(a: object, b: object) -> bool:
    if a == b:
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a >= b
    return False


def _label(config: Config, start: Config) -> str:
    changed = config.changed(start)
    return ", ".join(f"{k}={v}" for k, v in changed.items()) or "the starting flags"


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (latency, goodput) points no other point beats on both (lower latency and higher goodput),
    by ascending latency: the trade-off curve of a tune."""
    front: list[tuple[float, float]] = []
    for latency, good in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or good > front[-1][1]:
            front.append((latency, good))
    return front
