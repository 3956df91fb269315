"""The families vLLM's HTTP front end adds to /metrics (prometheus-fastapi-instrumentator, as vLLM 0.32
configures it) and the Python runtime's own (`python_gc_*`, `python_info`), in the real payload's shape
and order: requests by handler/method/status class, request and response sizes (the Content-Length
headers only: a streamed response counts 0), latency in a fine unlabelled histogram and a coarse one by
handler. /metrics, /health, /load, /ping and /version are not counted, as in vLLM."""

from __future__ import annotations

import gc
import platform
import sys
import time
from dataclasses import dataclass, field

from vtui.sim.metrics import fmt

EXCLUDED = frozenset({"/metrics", "/health", "/load", "/ping", "/version", "/server_info"})
HIGHR_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    2.5,
    3.0,
    3.5,
    4.0,
    4.5,
    5.0,
    7.5,
    10.0,
    30.0,
    60.0,
)
HANDLER_BUCKETS = (0.1, 0.5, 1.0)
HELP_REQUESTS = "Total number of requests by method, status and handler."
HELP_REQ_SIZE = (
    "Content length of incoming requests by handler. Only value of header is respected. "
    "Otherwise ignored. No percentile calculated. "
)
HELP_RESP_SIZE = (
    "Content length of outgoing responses by handler. Only value of header is respected. "
    "Otherwise ignored. No percentile calculated. "
)
HELP_HIGHR = (
    "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. "
)
HELP_DURATION = (
    "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. "
)


def _labels(**pairs: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"


@dataclass
class _Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        index = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[index] += 1
        self.total += value

    def lines(self, name: str, **labels: str) -> list[str]:
        out, cumulative = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulative += count
            out.append(f"{name}_bucket{_labels(**labels, le=fmt(bound))} {fmt(float(cumulative))}")
        tail = _labels(**labels) if labels else ""
        out.append(f"{name}_count{tail} {fmt(float(sum(self.counts)))}")
        out.append(f"{name}_sum{tail} {fmt(self.total)}")
        return out


class HttpMetrics:
    """What the instrumentator counts; `record` is called once per answered request."""

    def __init__(self, clock=time.time) -> None:
        self.clock = clock
        self.created = clock()
        self.requests: dict[tuple[str, str, str], float] = {}  # (handler, method, status class) -> count
        self.req_size: dict[str, list[float]] = {}  # handler -> [count, sum]
        self.resp_size: dict[str, list[float]] = {}
        self.highr = _Histogram(HIGHR_BUCKETS)
        self.by_handler: dict[tuple[str, str], _Histogram] = {}
        self.born: dict[tuple, float] = {}  # each labelled child's creation time (its _created gauge)

    def record(
        self, handler: str, method: str, status: int, request_bytes: int, response_bytes: int, seconds: float
    ) -> None:
        if handler in EXCLUDED:
            return
        key = (handler, method, f"{status // 100}xx")
        for child in (("requests", *key), ("req", handler), ("resp", handler), ("dur", handler, method)):
            self.born.setdefault(child, self.clock())
        self.requests[key] = self.requests.get(key, 0.0) + 1
        for table, size in ((self.req_size, request_bytes), (self.resp_size, response_bytes)):
            row = table.setdefault(handler, [0.0, 0.0])
            row[0] += 1
            row[1] += size
        self.highr.observe(seconds)
        self.by_handler.setdefault((handler, method), _Histogram(HANDLER_BUCKETS)).observe(seconds)

    def lines(self) -> list[str]:
        out = [f"# HELP http_requests_total {HELP_REQUESTS}", "# TYPE http_requests_total counter"]
        out += [
            f"http_requests_total{_labels(handler=h, method=m, status=s)} {fmt(n)}"
            for (h, m, s), n in self.requests.items()
        ]
        if self.requests:
            out += [f"# HELP http_requests_created {HELP_REQUESTS}", "# TYPE http_requests_created gauge"]
            out += [
                f"http_requests_created{_labels(handler=h, method=m, status=s)} "
                f"{fmt(self.born[('requests', h, m, s)])}"
                for (h, m, s) in self.requests
            ]
        for name, table, tag, help_text in (
            ("http_request_size_bytes", self.req_size, "req", HELP_REQ_SIZE),
            ("http_response_size_bytes", self.resp_size, "resp", HELP_RESP_SIZE),
        ):
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} summary"]
            for handler, (count, total) in table.items():
                out += [
                    f"{name}_count{_labels(handler=handler)} {fmt(count)}",
                    f"{name}_sum{_labels(handler=handler)} {fmt(total)}",
                ]
            if table:
                out += [f"# HELP {name}_created {help_text}", f"# TYPE {name}_created gauge"]
                out += [f"{name}_created{_labels(handler=h)} {fmt(self.born[(tag, h)])}" for h in table]
        out += [
            f"# HELP http_request_duration_highr_seconds {HELP_HIGHR}",
            "# TYPE http_request_duration_highr_seconds histogram",
            *self.highr.lines("http_request_duration_highr_seconds"),
            f"# HELP http_request_duration_highr_seconds_created {HELP_HIGHR}",
            "# TYPE http_request_duration_highr_seconds_created gauge",
            f"http_request_duration_highr_seconds_created {fmt(self.created)}",
            f"# HELP http_request_duration_seconds {HELP_DURATION}",
            "# TYPE http_request_duration_seconds histogram",
        ]
        for (handler, method), hist in self.by_handler.items():
            out += hist.lines("http_request_duration_seconds", handler=handler, method=method)
        if self.by_handler:
            out += [
                f"# HELP http_request_duration_seconds_created {HELP_DURATION}",
                "# TYPE http_request_duration_seconds_created gauge",
            ]
            out += [
                f"http_request_duration_seconds_created{_labels(handler=h, method=m)} "
                f"{fmt(self.born[('dur', h, m)])}"
                for (h, m) in self.by_handler
            ]
        return out


def python_lines() -> list[str]:
    """prometheus_client's GC and platform collectors."""
    stats = gc.get_stats()
    out = []
    for name, key, help_text in (
        ("python_gc_objects_collected_total", "collected", "Objects collected during gc"),
        ("python_gc_objects_uncollectable_total", "uncollectable", "Uncollectable objects found during GC"),
        ("python_gc_collections_total", "collections", "Number of times this generation was collected"),
    ):
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
        out += [f'{name}{{generation="{gen}"}} {fmt(float(s[key]))}' for gen, s in enumerate(stats)]
    v = sys.version_info
    out += [
        "# HELP python_info Python platform information",
        "# TYPE python_info gauge",
        f'python_info{{implementation="{platform.python_implementation()}",major="{v.major}",'
        f'minor="{v.minor}",patchlevel="{v.micro}",version="{v.major}.{v.minor}.{v.micro}"}} 1.0',
    ]
    return out
