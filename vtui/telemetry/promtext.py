"""A fast reader of Prometheus text for the `vllm:` families vtui needs (and vllm-router's own
`vllm_router_*`, which its Prometheus port serves): one pass of `str` methods over
the payload, label sets kept as raw text and parsed only when asked (cached, since they repeat every
scrape). Tens of times faster than prometheus_client on a real payload (benchmarks/bench_parse.py), with
identical values (tests/telemetry/test_telemetry_promtext.py).

A truncated or partly malformed payload yields every line that can be read; bad lines are counted.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import AnyStr

# Histograms vtui reads, by role (the key of MetricsSample's percentiles), newest name first: V1 (>= 0.11)
# renamed vllm:time_per_output_token_seconds (V0, early V1) to vllm:inter_token_latency_seconds.
HISTOGRAM_ROLES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "ttft": ("vllm:time_to_first_token_seconds",),
        "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "e2e": ("vllm:e2e_request_latency_seconds",),
        "queue": ("vllm:request_queue_time_seconds",),
    }
)
# Gauges, counters and histograms (base names) that vtui reads, V1 and V0 names alike.
HISTOGRAMS: tuple[str, ...] = tuple(name for names in HISTOGRAM_ROLES.values() for name in names)
SCALARS: tuple[str, ...] = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
    "vllm:num_requests_swapped",  # V0
    "vllm:kv_cache_usage_perc",  # V1 (a 0..1 fraction)
    "vllm:gpu_cache_usage_perc",  # V0 and early V1 (also a fraction)
    "vllm:cpu_cache_usage_perc",  # V0
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total",  # V1
    "vllm:prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_queries_total",  # early V1 (0.8-0.9)
    "vllm:gpu_prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_hit_rate",  # V0 gauge
    "vllm:cpu_prefix_cache_hit_rate",  # V0 gauge
    "vllm:request_success_total",
    "vllm:cache_config_info",
    "vllm:engine_sleep_state",  # {sleep_state="awake"|"weights_offloaded"|"discard_all"}: 1 for the state
    "vllm:engine_sleep_level",
)
# vllm-router's own series (0.1.17, its `--prometheus-port`), read for a router instance. Its counters
# appear with the first request, error or retry they count; before that a payload holds only the gauges.
ROUTER_SCALARS: tuple[str, ...] = (
    "vllm_router_requests_total",  # {route}: requests it took
    "vllm_router_request_errors_total",  # {route, error_type}: answered with an error
    "vllm_router_retries_total",  # {route}: sent again to another worker
    "vllm_router_processed_requests_total",  # {worker}: requests each worker was given
    "vllm_router_active_workers",
)
WANTED: frozenset[str] = frozenset(
    SCALARS
    + ROUTER_SCALARS
    + tuple(f"{h}{suffix}" for h in HISTOGRAMS for suffix in ("_bucket", "_count", "_sum"))
)
PREFIX = "vllm"  # every name in WANTED starts so: `vllm:` (vLLM) and `vllm_router_` (its router)

# Names that only one generation of vLLM exposes: they tell a payload's naming apart.
V1_ONLY: frozenset[str] = frozenset(
    {
        "vllm:kv_cache_usage_perc",
        "vllm:inter_token_latency_seconds_count",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_requests_waiting_by_reason",
    }
)
V0_ONLY: frozenset[str] = frozenset(
    {
        "vllm:gpu_cache_usage_perc",
        "vllm:time_per_output_token_seconds_count",
        "vllm:gpu_prefix_cache_hit_rate",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:cpu_cache_usage_perc",
        "vllm:num_requests_swapped",
    }
)

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Histogram:
    """One histogram summed over its series: cumulative bucket counts by upper bound (ending at +Inf)."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    count: float | None
    sum: float | None

    def minus(self, older: Histogram) -> Histogram | None:
        """The observations made between `older` and this one; None when the buckets changed or a count
        went down (the server restarted)."""
        if older.bounds != self.bounds:
            return None
        counts = tuple(a - b for a, b in zip(self.counts, older.counts, strict=True))
        if any(c < 0 for c in counts):
            return None
        count = None if self.count is None or older.count is None else self.count - older.count
        total = None if self.sum is None or older.sum is None else self.sum - older.sum
        return Histogram(self.bounds, counts, count, total)

    @property
    def observations(self) -> float:
        return self.counts[-1] if self.counts else 0.0

    def quantile(self, q: float) -> float | None:
        """Prometheus' histogram_quantile: linear interpolation inside the bucket holding rank q*total;
        the largest finite bound when the rank falls in +Inf; None without observations."""
        return histogram_quantile(q, self.bounds, self.counts)


def histogram_quantile(q: float, bounds: tuple[float, ...], counts: tuple[float, ...]) -> float | None:
    if len(bounds) < 2 or not math.isinf(bounds[-1]) or not 0.0 <= q <= 1.0:
        return None
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    # Prometheus searches all but the +Inf bucket for the first cumulative count >= rank.
    b = len(bounds) - 1
    for i in range(len(bounds) - 1):
        if counts[i] >= rank:
            b = i
            break
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start = 0.0 if b == 0 else bounds[b - 1]
    below = 0.0 if b == 0 else counts[b - 1]
    in_bucket = counts[b] - below
    if in_bucket <= 0:
        return bounds[b]
    return start + (bounds[b] - start) * ((rank - below) / in_bucket)


@functools.lru_cache(maxsize=8192)
def parse_labels(raw: str) -> Labels:
    """`a="x",b="y\\"z"` -> (("a", "x"), ("b", 'y"z')). Tolerant: stops at the first malformed pair."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(raw)
    while i < n:
        eq = raw.find("=", i)
        if eq < 0:
            break
        key = raw[i:eq].strip(" ,")
        q = raw.find('"', eq)
        if q < 0:
            break
        j = q + 1
        while True:
            k = raw.find('"', j)
            if k < 0:
                return tuple(out)
            slashes = 0
            while raw[k - 1 - slashes] == "\\":
                slashes += 1
            if slashes % 2 == 0:
                break
            j = k + 1
        value = raw[q + 1 : k]
        if "\\" in value:
            value = value.replace("\\\\", "\0").replace('\\"', '"').replace("\\n", "\n").replace("\0", "\\")
        out.append((key, value))
        i = k + 1
    return tuple(out)


@functools.lru_cache(maxsize=8192)
def _label(raw: str, key: str) -> str | None:
    """The value of label `key` in raw label text (the last one, as a dict of them has it)."""
    return dict(parse_labels(raw)).get(key)


@functools.lru_cache(maxsize=8192)
def _bound(raw: str) -> float | None:
    """A bucket's `le` as a number; None when missing or unreadable."""
    try:
        le = float(_label(raw, "le") or "nan")
    except ValueError:
        return None
    return None if math.isnan(le) else le


@functools.lru_cache(maxsize=1024)
def _histogram(
    buckets: tuple[tuple[str, float], ...], count: float | None, total: float | None
) -> Histogram | None:
    """One histogram from its `_bucket` rows, summed over series. Cached: a steady server's buckets
    repeat from one scrape to the next (Histogram is frozen)."""
    per_le: dict[float, float] = {}
    for raw, value in buckets:
        le = _bound(raw)
        if le is not None:
            per_le[le] = per_le.get(le, 0.0) + value
    if per_le and math.inf not in per_le and count is not None and count >= max(per_le.values()):
        per_le[math.inf] = count  # a paste that elided the +Inf bucket but kept _count, which equals it
    if not per_le or math.inf not in per_le:
        return None
    bounds = tuple(sorted(per_le))
    counts: list[float] = []
    running = 0.0
    for b in bounds:  # enforce monotonic cumulative counts, as Prometheus does
        running = max(running, per_le[b])
        counts.append(running)
    return Histogram(bounds, tuple(counts), count, total)


@dataclass(frozen=True)
class MetricsSnapshot:
    """The raw values of one /metrics payload: sample name -> ((raw label text, value), ...)."""

    series: Mapping[str, tuple[tuple[str, float], ...]]
    malformed: int = 0

    def has(self, name: str) -> bool:
        return name in self.series

    def names(self) -> frozenset[str]:
        return frozenset(self.series)

    def labelled(self, name: str) -> list[tuple[dict[str, str], float]]:
        return [(dict(parse_labels(raw)), value) for raw, value in self.series.get(name, ())]

    def total(self, name: str) -> float | None:
        """Sum over every series (data-parallel engines, model names); None when absent."""
        rows = self.series.get(name)
        if not rows:
            return None
        return math.fsum(value for _, value in rows)

    def mean(self, name: str) -> float | None:
        rows = self.series.get(name)
        if not rows:
            return None
        return math.fsum(value for _, value in rows) / len(rows)

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Values summed per value of `label` (over engines); series without the label go under ""."""
        out: dict[str, float] = {}
        for raw, value in self.series.get(name, ()):
            key = _label(raw, label) or ""
            out[key] = out.get(key, 0.0) + value
        return out

    def histogram(self, base: str) -> Histogram | None:
        """The histogram `base` summed over its series, or None when the payload lacks its buckets."""
        buckets = self.series.get(base + "_bucket")
        if not buckets:
            return None
        return _histogram(buckets, self.total(base + "_count"), self.total(base + "_sum"))

    @property
    def vllm_names(self) -> str | None:
        """ "v1" when only the new metric names appear, "v0" only the old ones, "mixed" both."""
        names = self.series.keys()
        v1 = any(n in V1_ONLY for n in names)
        v0 = any(n in V0_ONLY for n in names)
        if v1 and v0:
            return "mixed"
        if v1:
            return "v1"
        if v0:
            return "v0"
        return None


_PASTE_MARKS = " \t>+|│"
_Row = tuple[str, str, float]  # (sample name, raw label text, value)
_BAD: _Row = ("", "", math.nan)  # a line that names a wanted sample but cannot be read (by identity)


def _read_line(line: str, wanted: frozenset[str]) -> _Row | None:
    """One payload line: its row when it is a wanted sample, `_BAD` when it is one but cannot be read,
    None for any other line."""
    if not line.startswith(PREFIX):
        line = line.lstrip(_PASTE_MARKS)  # a pasted payload: indented, quoted, a diff's "+"
        if not line.startswith(PREFIX):
            return None
    brace = line.find("{")
    if brace < 0:
        name, _, rest = line.partition(" ")
        raw = ""
    else:
        name = line[:brace]
        if name not in wanted:
            return None
        close = line.rfind("}")
        if close < brace:
            if not name.endswith("_info"):
                return _BAD
            # an info gauge cut short (a truncated paste): the labels whose values it holds whole
            cut = line.rfind('",', brace)
            return (name, line[brace + 1 : cut + 1], 1.0) if cut > brace else _BAD
        raw = line[brace + 1 : close]
        rest = line[close + 1 :]
    if name not in wanted:
        return None
    rest = rest.strip()
    if not rest and name.endswith("_info"):
        rest = "1"  # an info gauge is always 1; a paste that elides it still gives its labels
    space = rest.find(" ")
    try:
        value = float(rest if space < 0 else rest[:space])
    except ValueError:
        return _BAD
    return name, raw, value


def _snapshot(rows: Iterable[_Row]) -> MetricsSnapshot:
    """The snapshot of a payload's rows (None rows already left out), in payload order."""
    series: dict[str, list[tuple[str, float]]] = {}
    bad = 0
    for row in rows:
        if row is _BAD:
            bad += 1
            continue
        name, raw, value = row
        bucket = series.get(name)
        if bucket is None:
            series[name] = [(raw, value)]
        else:
            bucket.append((raw, value))
    return MetricsSnapshot({k: tuple(v) for k, v in series.items()}, bad)


def parse_metrics(text: str, wanted: frozenset[str] | Iterable[str] = WANTED) -> MetricsSnapshot:
    """Parse a /metrics payload, keeping only the samples in `wanted` (names starting with PREFIX)."""
    wanted = wanted if isinstance(wanted, frozenset) else frozenset(wanted)
    rows: list[_Row] = []
    for line in text.split("\n"):
        if not line.startswith(PREFIX) and (PREFIX not in line or line.startswith("#")):  # HELP, TYPE
            continue
        row = _read_line(line, wanted)
        if row is not None:
            rows.append(row)
    return _snapshot(rows)


class _Seen(dict[str, "_Row | None"]):
    """Lines already read, with their rows; a new line is read on first lookup."""

    __slots__ = ("wanted",)

    def __init__(self, wanted: frozenset[str]) -> None:
        super().__init__()
        self.wanted = wanted

    def __missing__(self, line: str) -> _Row | None:
        row = self[line] = _read_line(line, self.wanted)
        return row


_PREFIX_BYTES = PREFIX.encode()


def _vllm_span(data: AnyStr, mark: AnyStr, newline: AnyStr) -> AnyStr:
    """The part of a payload that holds every line naming a wanted metric: from the start of the first
    line with `mark` (PREFIX: `vllm:` and vllm-router's `vllm_router_`) to the end of the last. Every wanted line lies inside it (outside, no line
    holds the mark at all); other lines inside it only make two spans differ more often."""
    first = data.find(mark)
    if first < 0:
        return data[:0]
    start = data.rfind(newline, 0, first) + 1
    end = data.find(newline, data.rfind(mark))
    return data[start:] if end < 0 else data[start:end]


def vllm_families(text: str) -> frozenset[str]:
    """Every vLLM metric family a payload names, read or not: from its samples and its HELP / TYPE lines
    (a family declared with no sample yet), histograms and counters by their base name."""
    families: set[str] = set()
    for line in text.split("\n"):
        if _FAMILY_MARK not in line:
            continue
        line = line.lstrip(_PASTE_MARKS)
        if line.startswith(("# HELP ", "# TYPE ")):
            line = line[7:]
        if not line.startswith(_FAMILY_MARK):
            continue
        end = next((i for i, c in enumerate(line) if c in _NAME_END), len(line))
        name = line[:end]
        for suffix in _SAMPLE_SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        if len(name) > len(_FAMILY_MARK):
            families.add(name)
    return frozenset(families)


_FAMILY_MARK = "vllm:"
_NAME_END = frozenset(" {\t")
_SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum", "_created")  # a histogram's samples


class MetricsParser:
    """`parse_metrics` for one server scraped again and again: each line read is remembered, so a
    payload costs a dictionary lookup per line it shares with the ones before (an idle or steady server
    repeats nearly all of them, a busy one its HELP/TYPE lines, most gauges and histogram buckets) and a
    read of the others. The same snapshot as `parse_metrics`, at a fraction of its cost. A payload whose
    `vllm:` span (`_vllm_span`) is the last one's exactly (an idle server: only its process and HTTP
    metrics moved) is not split at all: one find and one compare. Bounded: the memory is emptied when it
    holds `spare` times the last payload's lines (plus 1024)."""

    __slots__ = ("wanted", "spare", "_seen", "_last", "_span")

    def __init__(self, wanted: frozenset[str] | Iterable[str] = WANTED, spare: int = 3) -> None:
        self.wanted = wanted if isinstance(wanted, frozenset) else frozenset(wanted)
        self.spare = spare
        self._seen = _Seen(self.wanted)
        self._last: tuple[list[_Row], MetricsSnapshot] | None = None
        self._span: str | bytes | None = None  # the last payload's `vllm:` span

    def parse_bytes(self, body: bytes) -> MetricsSnapshot:
        """`parse` of a payload as received (UTF-8): decoded only when its `vllm:` span moved."""
        span = _vllm_span(body, _PREFIX_BYTES, b"\n")
        if self._last is not None and span == self._span:
            return self._last[1]
        snap = self.parse(body.decode("utf-8", "replace"))
        self._span = span
        return snap

    def parse(self, text: str) -> MetricsSnapshot:
        """The payload's snapshot: the very object of the last call when its rows are the same (a
        steady server), which `MetricsWindow` takes as "nothing of it to read again"."""
        span = _vllm_span(text, PREFIX, "\n")
        if self._last is not None and span == self._span:
            return self._last[1]
        self._span = span
        lines = span.split("\n")
        if len(self._seen) > self.spare * len(lines) + 1024:
            self._seen.clear()
        rows = [row for row in map(self._seen.__getitem__, lines) if row is not None]
        if self._last is not None and self._last[0] == rows:
            return self._last[1]
        snap = _snapshot(rows)
        self._last = (rows, snap)
        return snap
