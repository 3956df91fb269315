"""The simulated engine's Prometheus /metrics, with real vLLM 0.32's families, types, labels, HELP text and
histogram buckets (as in real vLLM 0.32 payloads: tests/telemetry/fixtures/metrics_*.txt), or an older version's names
(`--sim-metrics-version v0`: gpu_cache_usage_perc, time_per_output_token_seconds, gpu_prefix_cache_*).
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable, Sequence

# (name, type, extra labels, bucket set, HELP) in vLLM 0.32's order.
FAMILIES: tuple[tuple[str, str, tuple[str, ...], str | None, str], ...] = (
    (
        "vllm:estimated_flops_per_gpu_total",
        "counter",
        (),
        None,
        "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations).",
    ),
    (
        "vllm:estimated_read_bytes_per_gpu_total",
        "counter",
        (),
        None,
        "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations).",
    ),
    (
        "vllm:estimated_write_bytes_per_gpu_total",
        "counter",
        (),
        None,
        "Estimated number of bytes written to memory per GPU (for Model Flops Utilization calculations).",
    ),
    ("vllm:num_requests_running", "gauge", (), None, "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "gauge", (), None, "Number of requests waiting to be processed."),
    (
        "vllm:num_requests_waiting_by_reason",
        "gauge",
        ("reason",),
        None,
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
    ),
    (
        "vllm:engine_sleep_state",
        "gauge",
        ("sleep_state",),
        None,
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
    ),
    ("vllm:kv_cache_usage_perc", "gauge", (), None, "KV-cache usage. 1 means 100 percent usage."),
    (
        "vllm:prefix_cache_queries_total",
        "counter",
        (),
        None,
        "Prefix cache queries, in terms of number of queried tokens.",
    ),
    (
        "vllm:prefix_cache_hits_total",
        "counter",
        (),
        None,
        "Prefix cache hits, in terms of number of cached tokens.",
    ),
    (
        "vllm:external_prefix_cache_queries_total",
        "counter",
        (),
        None,
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
    ),
    (
        "vllm:external_prefix_cache_hits_total",
        "counter",
        (),
        None,
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
    ),
    (
        "vllm:mm_cache_queries_total",
        "counter",
        (),
        None,
        "Multi-modal cache queries, in terms of number of queried items.",
    ),
    (
        "vllm:mm_cache_hits_total",
        "counter",
        (),
        None,
        "Multi-modal cache hits, in terms of number of cached items.",
    ),
    ("vllm:num_preemptions_total", "counter", (), None, "Cumulative number of preemption from the engine."),
    ("vllm:prompt_tokens_total", "counter", (), None, "Number of prefill tokens processed."),
    (
        "vllm:prompt_tokens_by_source_total",
        "counter",
        ("source",),
        None,
        "Number of prompt tokens by source.",
    ),
    (
        "vllm:prompt_tokens_cached_total",
        "counter",
        (),
        None,
        "Number of cached prompt tokens (local + external).",
    ),
    (
        "vllm:prompt_tokens_cached_by_source_total",
        "counter",
        ("source",),
        None,
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
    ),
    ("vllm:generation_tokens_total", "counter", (), None, "Number of generation tokens processed."),
    (
        "vllm:request_success_total",
        "counter",
        ("finished_reason",),
        None,
        "Count of successfully processed requests.",
    ),
    (
        "vllm:admission_rejections_total",
        "counter",
        ("reason",),
        None,
        "Number of admission attempts rejected by a queue limit, by reason.",
    ),
    ("vllm:request_prompt_tokens", "histogram", (), "len", "Number of prefill tokens processed."),
    ("vllm:request_generation_tokens", "histogram", (), "len", "Number of generation tokens processed."),
    (
        "vllm:iteration_tokens_total",
        "histogram",
        (),
        "iter",
        "Histogram of number of tokens per engine_step.",
    ),
    (
        "vllm:request_max_num_generation_tokens",
        "histogram",
        (),
        "len",
        "Histogram of maximum number of requested generation tokens.",
    ),
    ("vllm:request_params_n", "histogram", (), "n", "Histogram of the n request parameter."),
    (
        "vllm:request_params_max_tokens",
        "histogram",
        (),
        "len",
        "Histogram of the max_tokens request parameter.",
    ),
    (
        "vllm:time_to_first_token_seconds",
        "histogram",
        (),
        "ttft",
        "Histogram of time to first token in seconds.",
    ),
    (
        "vllm:inter_token_latency_seconds",
        "histogram",
        (),
        "itl",
        "Histogram of inter-token latency in seconds.",
    ),
    (
        "vllm:request_time_per_output_token_seconds",
        "histogram",
        (),
        "itl",
        "Histogram of time_per_output_token_seconds per request.",
    ),
    (
        "vllm:e2e_request_latency_seconds",
        "histogram",
        (),
        "req",
        "Histogram of e2e request latency in seconds.",
    ),
    (
        "vllm:request_queue_time_seconds",
        "histogram",
        (),
        "req",
        "Histogram of time spent in WAITING phase for request.",
    ),
    (
        "vllm:request_inference_time_seconds",
        "histogram",
        (),
        "req",
        "Histogram of time spent in RUNNING phase for request.",
    ),
    (
        "vllm:request_prefill_time_seconds",
        "histogram",
        (),
        "req",
        "Histogram of time spent in PREFILL phase for request.",
    ),
    (
        "vllm:request_decode_time_seconds",
        "histogram",
        (),
        "req",
        "Histogram of time spent in DECODE phase for request.",
    ),
    (
        "vllm:request_num_preemptions",
        "histogram",
        (),
        "preempt",
        "Histogram of the number of times a request was preempted.",
    ),
    (
        "vllm:request_prefill_kv_computed_tokens",
        "histogram",
        (),
        "len",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
    ),
    ("vllm:cache_config_info", "gauge", (), None, "Information of the LLMEngine CacheConfig"),
)

TIME_BUCKETS = {
    "ttft": (
        0.001,
        0.005,
        0.01,
        0.02,
        0.04,
        0.06,
        0.08,
        0.1,
        0.25,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
        20.0,
        40.0,
        80.0,
        160.0,
        640.0,
        2560.0,
    ),
    "itl": (
        0.01,
        0.025,
        0.05,
        0.075,
        0.1,
        0.15,
        0.2,
        0.3,
        0.4,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
        20.0,
        40.0,
        80.0,
    ),
    "req": (
        0.3,
        0.5,
        0.8,
        1.0,
        1.5,
        2.0,
        2.5,
        5.0,
        10.0,
        15.0,
        20.0,
        30.0,
        40.0,
        50.0,
        60.0,
        120.0,
        240.0,
        480.0,
        960.0,
        1920.0,
        7680.0,
    ),
    "iter": (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    "n": (1, 2, 5, 10, 20),
    "preempt": (1, 2, 3, 4, 5, 10, 20),
}

# v0-era names (vLLM ≤ 0.8): a rename, or absent (None).
V0_NAMES = {
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds",
    "vllm:prefix_cache_queries_total": "vllm:gpu_prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "vllm:gpu_prefix_cache_hits_total",
}
V0_KEEP = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:iteration_tokens_total",
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:cache_config_info",
    *V0_NAMES,
}


def buckets_1_2_5(limit: int) -> tuple[float, ...]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, … up to `limit`."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exp
            if value > limit:
                return tuple(out)
            out.append(value)
        exp += 1


def fmt(value: float) -> str:
    """prometheus_client's floatToGoString."""
    if value == float("inf"):
        return "+Inf"
    if value != value:
        return "NaN"
    s = repr(float(value))
    dot = s.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


class Histogram:
    __slots__ = ("bounds", "counts", "total", "count")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1


class EngineMetrics:
    """Counters and histograms the scheduler updates in place; gauges come from `gauges()` at render."""

    def __init__(self, max_model_len: int) -> None:
        self.created = time.time()
        self.counters: dict[str, float] = {}
        self.labelled: dict[tuple[str, str], float] = {}
        lens = buckets_1_2_5(max_model_len)
        self.hist: dict[str, Histogram] = {}
        for name, kind, _labels, bucket, _help in FAMILIES:
            if kind == "histogram" and bucket:
                self.hist[name] = Histogram(lens if bucket == "len" else TIME_BUCKETS[bucket])

    def inc(self, name: str, amount: float = 1.0, label: str | None = None) -> None:
        if label is None:
            self.counters[name] = self.counters.get(name, 0.0) + amount
        else:
            self.labelled[(name, label)] = self.labelled.get((name, label), 0.0) + amount

    def get(self, name: str, label: str | None = None) -> float:
        return self.counters.get(name, 0.0) if label is None else self.labelled.get((name, label), 0.0)


_LABEL_VALUES = {
    "vllm:num_requests_waiting_by_reason": ("capacity", "deferred"),
    "vllm:engine_sleep_state": ("awake", "weights_offloaded", "discard_all"),
    "vllm:prompt_tokens_by_source_total": ("local_compute", "local_cache_hit", "external_kv_transfer"),
    "vllm:prompt_tokens_cached_by_source_total": ("device", "host", "p2p", "disk", "external_unspecified"),
    "vllm:request_success_total": ("stop", "length", "abort", "error", "repetition"),
    "vllm:admission_rejections_total": ("max_num_queued_reqs", "max_num_queued_tokens"),
}


def _labels(pairs: dict[str, str]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"


def _process_lines(start_time: float) -> list[str]:
    rss = vms = 0.0
    cpu = 0.0
    try:
        with open("/proc/self/statm") as fh:
            parts = fh.read().split()
        page = os.sysconf("SC_PAGE_SIZE")
        vms, rss = float(parts[0]) * page, float(parts[1]) * page
        times = os.times()
        cpu = times.user + times.system
    except (OSError, ValueError, IndexError):
        pass
    try:
        fds = float(len(os.listdir("/proc/self/fd")))
    except OSError:
        fds = 0.0
    import resource

    max_fds = float(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    return [
        "# HELP process_virtual_memory_bytes Virtual memory size in bytes.",
        "# TYPE process_virtual_memory_bytes gauge",
        f"process_virtual_memory_bytes {fmt(vms)}",
        "# HELP process_resident_memory_bytes Resident memory size in bytes.",
        "# TYPE process_resident_memory_bytes gauge",
        f"process_resident_memory_bytes {fmt(rss)}",
        "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
        "# TYPE process_start_time_seconds gauge",
        f"process_start_time_seconds {fmt(round(start_time, 2))}",
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.",
        "# TYPE process_cpu_seconds_total counter",
        f"process_cpu_seconds_total {fmt(round(cpu, 2))}",
        "# HELP process_open_fds Number of open file descriptors.",
        "# TYPE process_open_fds gauge",
        f"process_open_fds {fmt(fds)}",
        "# HELP process_max_fds Maximum number of open file descriptors.",
        "# TYPE process_max_fds gauge",
        f"process_max_fds {fmt(max_fds)}",
    ]


def render(
    metrics: EngineMetrics,
    model_name: str,
    gauges: Callable[[], dict[str, float]],
    cache_info: dict[str, str],
    version: str = "0.32",
    start_time: float | None = None,
    head: Sequence[str] = (),
    tail: Sequence[str] = (),
) -> str:
    """The whole /metrics payload: `head` (the Python collectors), the process and `vllm:` families,
    then `tail` (the HTTP front end's), in the real payload's order."""
    v0 = version == "v0"
    base = {"model_name": model_name} if v0 else {"engine": "0", "model_name": model_name}
    values = gauges()
    out = [*head, *_process_lines(start_time or metrics.created)]
    created = fmt(metrics.created)
    for name, kind, extra, _bucket, help_text in FAMILIES:
        if v0 and name not in V0_KEEP:
            continue
        shown = V0_NAMES.get(name, name) if v0 else name
        labelled_base = {
            k: v for k, v in base.items() if not (name == "vllm:admission_rejections_total" and k == "engine")
        }
        out.append(f"# HELP {shown} {help_text}")
        out.append(f"# TYPE {shown} {kind}")
        created_rows: list[str] = []
        if kind == "histogram":
            hist = metrics.hist[name]
            cumulative = 0
            lab = dict(labelled_base)
            for bound, count in zip((*hist.bounds, float("inf")), hist.counts, strict=True):
                cumulative += count
                out.append(f"{shown}_bucket{_labels({**lab, 'le': fmt(bound)})} {fmt(float(cumulative))}")
            out.append(f"{shown}_count{_labels(lab)} {fmt(float(hist.count))}")
            out.append(f"{shown}_sum{_labels(lab)} {fmt(hist.total)}")
            created_rows.append(f"{_labels(lab)} {created}")
        elif name == "vllm:cache_config_info":
            out.append(f"{shown}{_labels({**cache_info, **({'engine': '0'} if not v0 else {})})} 1.0")
        elif extra:
            for value in _LABEL_VALUES[name]:
                lab = {**labelled_base, extra[0]: value}
                if kind == "counter":
                    number = metrics.get(name, value)
                    created_rows.append(f"{_labels(lab)} {created}")
                else:
                    number = values.get(f"{name}/{value}", 0.0)
                out.append(f"{shown}{_labels(lab)} {fmt(float(number))}")
        else:
            number = metrics.get(name) if kind == "counter" else values.get(name, 0.0)
            out.append(f"{shown}{_labels(labelled_base)} {fmt(float(number))}")
            if kind == "counter":
                created_rows.append(f"{_labels(labelled_base)} {created}")
        if created_rows and not v0:
            stem = shown[: -len("_total")] if shown.endswith("_total") and kind == "counter" else shown
            out.append(f"# HELP {stem}_created {help_text}")
            out.append(f"# TYPE {stem}_created gauge")
            out.extend(f"{stem}_created{row}" for row in created_rows)
    out.extend(tail)
    out.append("")
    return "\n".join(out)
