"""The runtime "KV cache short" diagnosis: from metrics samples (KV cache usage, requests waiting,
preemptions), with hysteresis (`KvShortWatch`), and its fix by the memory rule the run follows
(`run_memory_rule`). Light on purpose: the dashboard imports it at its first samples, and the startup
log's diagnosis (`telemetry.diagnosis`) only when it reads a log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from vtui.core.flagvalues import int_flag
from vtui.core.vllm_memory import MemoryRule, memory_rule
from vtui.telemetry.facts import StartupFacts
from vtui.telemetry.metrics import MetricsSample
from vtui.telemetry.problems import Problem
from vtui.telemetry.problems import flag_fix as _fix
from vtui.telemetry.remedies import kv_short_remedies

__all__ = [
    "KV_SHORT_ENTER",
    "KV_SHORT_ENTER_S",
    "KV_SHORT_LEAVE",
    "KV_SHORT_LEAVE_S",
    "KvShortWatch",
    "diagnose_runtime",
    "kv_short",
    "run_memory_rule",
]


def run_memory_rule(
    facts: StartupFacts | None, flags: Mapping[str, object] | None = None, backend: str = "cuda"
) -> MemoryRule | None:
    """The memory rule a run followed (`core.vllm_memory.memory_rule`), from its log: its vLLM version,
    and "Extended KV cache to …" (`facts.extended_kv_gib`) as proof of 0.34's extensible KV cache. None
    when the log names no version and shows no extended cache."""
    if facts is None or (facts.vllm_version is None and facts.extended_kv_gib is None):
        return None
    given = dict(flags or {})
    util = facts.arg("gpu_memory_utilization")
    if "gpu-memory-utilization" not in given and isinstance(util, float | int) and not isinstance(util, bool):
        given["gpu-memory-utilization"] = util
    rule = memory_rule(given, facts.vllm_version, backend)
    if facts.extended_kv_gib is not None and not rule.extensible_kv:
        rule = replace(
            rule,
            extensible_kv=True,
            checks_free_memory=False,
            utilization=rule.utilization if rule.utilization_set else 1.0,
        )
    return rule


def kv_short(
    message: str,
    running: float | None,
    flags: Mapping[str, object] | None,
    rule: MemoryRule | None = None,
) -> Problem:
    fix = _kv_short_fix(running, flags, rule) if flags is not None else None
    remedies = kv_short_remedies(rule)
    return Problem(
        "kv_cache_short",
        message,
        fix,
        "The KV cache is full while requests wait, so vLLM preempts running requests and recomputes them later: "
        "throughput drops and latency spikes. In order: " + "; ".join(t for _, t in remedies) + ".",
        tuple(t for _, t in remedies),
    )


KV_BYTES_STEP = 1.25  # a KV-short fix raises an explicit --kv-cache-memory-bytes by a quarter
MIB = 1024**2


def _kv_short_fix(
    running: float | None, flags: Mapping[str, object], rule: MemoryRule | None = None
) -> Mapping[str, object] | None:
    """The first of the seeds' remedies that a flag change can apply, given the instance's flags and its
    vLLM's memory rule. "Give KV more memory" raises --kv-cache-memory-bytes when it is set: vLLM then
    sizes the cache from it alone, and a higher --gpu-memory-utilization would buy nothing; an unset
    utilization is 1.0 with 0.34's extensible KV cache, and is not raised either."""
    max_len = flags.get("max-model-len")
    if isinstance(max_len, int) and max_len > 16384:
        return _fix(max_model_len=16384)
    kv_bytes = int_flag(flags.get("kv-cache-memory-bytes"))
    if kv_bytes is not None and kv_bytes > 0:
        return _fix(kv_cache_memory_bytes=-(-int(kv_bytes * KV_BYTES_STEP) // MIB) * MIB)  # whole MiB, up
    util = rule.utilization if rule is not None else flags.get("gpu-memory-utilization", 0.9)
    if kv_bytes is None and isinstance(util, float | int) and util < 0.92:
        return _fix(gpu_memory_utilization=0.92)
    seqs = flags.get("max-num-seqs", 256)
    if running and isinstance(seqs, int) and 1 <= int(running) < seqs:
        return _fix(max_num_seqs=int(running))
    if flags.get("kv-cache-dtype") in (None, "auto"):
        return _fix(kv_cache_dtype="fp8")
    return None


class _Counted(Protocol):
    """A sample in an instance's history, as much of it as the runtime diagnosis reads (a MetricsSample
    or the dashboard's HistoryPoint)."""

    @property
    def at(self) -> float: ...
    @property
    def preemptions_total(self) -> float | None: ...


class _Load(_Counted, Protocol):
    """What the KV-short watch reads of a sample (a MetricsSample or a HistoryPoint)."""

    @property
    def kv_usage(self) -> float | None: ...
    @property
    def waiting(self) -> float | None: ...
    @property
    def running(self) -> float | None: ...


KV_SHORT_ENTER = 0.95  # KV cache usage at or above this, with requests waiting: under pressure
KV_SHORT_LEAVE = 0.85  # below this, or nothing waiting: relieved
KV_SHORT_ENTER_S = 10.0  # pressure (with preemptions rising) this long before "KV cache short" shows
KV_SHORT_LEAVE_S = 30.0  # relief this long before it goes


def _short_message(point: _Load, rate: float | None) -> str:
    usage, waiting = point.kv_usage or 0.0, point.waiting or 0.0
    return f"KV cache {usage:.0%} full, {waiting:g} waiting" + (f", {rate:.1f} preemptions/s" if rate else "")


def diagnose_runtime(
    sample: MetricsSample,
    history: Sequence[_Counted],
    flags: Mapping[str, object] | None = None,
    rule: MemoryRule | None = None,
) -> list[Problem]:
    """ "KV cache short" in one sample: usage >= 95% with requests waiting and preemptions rising (over
    `history`, the instance's recent samples, oldest first). `flags` (the instance's) makes the fix
    concrete; `rule` (its vLLM's memory rule, `run_memory_rule`) what raising the utilization can do.
    What the dashboard shows goes through `KvShortWatch`, which adds hysteresis."""
    if sample.kv_usage is None or sample.kv_usage < KV_SHORT_ENTER or not sample.waiting:
        return []
    rising = bool(sample.preemptions_per_s and sample.preemptions_per_s > 0)
    if not rising and sample.preemptions_total is not None:
        earlier = [
            h.preemptions_total for h in history if h.preemptions_total is not None and h.at < sample.at
        ]
        rising = bool(earlier) and sample.preemptions_total > min(earlier) and not sample.counter_reset
    if not rising:
        return []
    return [kv_short(_short_message(sample, sample.preemptions_per_s), sample.running, flags, rule)]


class KvShortWatch:
    """ "KV cache short" with hysteresis, for one instance's samples in time order (their own `at`: the
    scraping supervisor's clock, so a replayed history decides as the live samples did).

    It shows once the cache has been under pressure (usage >= `enter` with requests waiting) for
    `enter_s`, with preemptions rising during that time, and no sample of relief (usage below `leave`,
    nothing waiting, or no usage reported) in between; a sample between the two thresholds neither
    starts nor breaks the run. Once shown, it goes only after `leave_s` of relief without one sample of
    pressure, or of a usage between the thresholds with requests waiting. So a cache that hovers around 95 %, or a queue that empties for a scrape, does not make the
    warning (and its fix key) come and go."""

    def __init__(
        self,
        *,
        enter: float = KV_SHORT_ENTER,
        leave: float = KV_SHORT_LEAVE,
        enter_s: float = KV_SHORT_ENTER_S,
        leave_s: float = KV_SHORT_LEAVE_S,
    ) -> None:
        if not leave <= enter:
            raise ValueError(f"the leave threshold {leave} is above the enter threshold {enter}")
        self.enter, self.leave, self.enter_s, self.leave_s = enter, leave, enter_s, leave_s
        self.reset()

    def reset(self) -> None:
        """Forget everything (the instance stopped serving, or runs other flags)."""
        self.problem: Problem | None = None
        self._pressed_since: float | None = None  # the unbroken run of pressure, shown or not
        self._base: float | None = None  # the preemption counter before that run
        self._preempted = False  # it rose during the run
        self._relieved_since: float | None = None  # relief while shown
        self._last_total: float | None = None
        self._last_at: float | None = None

    def observe(
        self,
        point: _Load,
        flags: Mapping[str, object] | None = None,
        preemptions_per_s: float | None = None,
        rule: MemoryRule | None = None,
    ) -> list[Problem]:
        """Take the next sample; the problem to show now ([] when none). A sample older than the last
        one is ignored; a preemption counter that went down (a new run) starts over."""
        if self._last_at is not None and point.at < self._last_at:
            return self.shown
        total = point.preemptions_total
        if total is not None and self._last_total is not None and total < self._last_total:
            self.reset()  # the counter restarted: another run of the server
        self._last_at = point.at
        usage, waiting = point.kv_usage, point.waiting or 0.0
        pressure = usage is not None and usage >= self.enter and waiting > 0
        relief = usage is None or usage < self.leave or waiting <= 0
        if pressure:
            if self._pressed_since is None:
                self._pressed_since = point.at
                self._base = self._last_total if self._last_total is not None else total
            rose = total is not None and self._base is not None and total > self._base
            self._preempted = self._preempted or rose or bool(preemptions_per_s and preemptions_per_s > 0)
            self._relieved_since = None
        elif relief:
            if self.problem is None:
                self._pressed_since, self._base, self._preempted = None, None, False
            elif self._relieved_since is None:
                self._relieved_since = point.at
        else:
            self._relieved_since = None  # between the thresholds: relief must be unbroken
        if total is not None:
            self._last_total = total
        if self.problem is not None:
            if (
                relief
                and self._relieved_since is not None
                and point.at - self._relieved_since >= self.leave_s
            ):
                self.reset()
                self._last_at, self._last_total = point.at, total
            elif pressure:
                self.problem = kv_short(_short_message(point, preemptions_per_s), point.running, flags, rule)
        elif (
            pressure
            and self._preempted
            and self._pressed_since is not None
            and point.at - self._pressed_since >= self.enter_s
        ):
            self.problem = kv_short(_short_message(point, preemptions_per_s), point.running, flags, rule)
        return self.shown

    @property
    def shown(self) -> list[Problem]:
        return [self.problem] if self.problem is not None else []
