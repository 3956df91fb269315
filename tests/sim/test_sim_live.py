"""Conformance of a live sim instance with real vLLM 0.32 (its captured outputs in tests/telemetry/fixtures): /metrics families,
types and label names; startup phases and the KV-size line; streaming; API key; failures in vLLM's words;
exit codes; SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest

from vtui.core.phases import phase_of, root_cause
from vtui.core.state import Phase

from .conftest import REFERENCE, free_port, launch

try:
    from vtui.telemetry.promtext import HISTOGRAMS, SCALARS
except ImportError:  # telemetry not built yet: the families the issue names
    HISTOGRAMS = (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
    )
    SCALARS = (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:request_success_total",
        "vllm:cache_config_info",
    )

SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$")


def families(text: str) -> dict[str, tuple[str | None, frozenset[str], tuple[str, ...]]]:
    """name -> (type, label names, histogram bucket bounds) from Prometheus text."""
    types: dict[str, str] = {}
    labels: dict[str, set[str]] = defaultdict(set)
    buckets: dict[str, list[str]] = defaultdict(list)
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        m = SAMPLE.match(line)
        if not m:
            continue
        name, raw = m.group(1), m.group(2) or ""
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', raw))
        base = name
        for suffix in ("_bucket", "_count", "_sum"):
            if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
                base = name[: -len(suffix)]
        if name.endswith("_bucket") and base != name:
            if pairs["le"] not in buckets[base]:
                buckets[base].append(pairs["le"])
            pairs.pop("le")
        labels[base] |= set(pairs)
    return {n: (types.get(n), frozenset(labels[n]), tuple(buckets[n])) for n in set(types) | set(labels)}


def reference(name: str) -> str:
    path = REFERENCE / name
    if not path.exists():
        pytest.skip("reference files not present")
    return path.read_text(errors="replace")


def test_metrics_conform_to_real_vllm(start_sim):
    sim = start_sim("Qwen/Qwen3-8B", "--max-model-len", "512")
    body = json.dumps({"prompt": "hello " * 30, "max_tokens": 8}).encode()
    assert sim.post("/v1/completions", body)[0] == 200
    real = families(reference("metrics_busy.txt"))
    status, payload = sim.get("/metrics")
    assert status == 200
    ours = families(payload.decode())
    for name in SCALARS + HISTOGRAMS:
        if name not in real:
            continue  # an older name vtui also reads
        assert name in ours, name
        assert ours[name][0] == real[name][0], name
        assert ours[name][1] == real[name][1], name
        assert ours[name][2] == real[name][2], name  # same buckets (max-model-len 512 as the reference)
    missing = sorted(n for n in real if n.startswith("vllm:") and n not in ours)
    assert not missing
    from vtui.telemetry.metrics import sample_of

    sample = sample_of(payload.decode())
    assert sample.generation_tokens_total == 8 and sample.kv_capacity_tokens and sample.block_size == 16


def test_v0_metric_names(start_sim):
    sim = start_sim("Qwen/Qwen3-8B", "--sim-metrics-version", "v0")
    text = sim.get("/metrics")[1].decode()
    assert "vllm:gpu_cache_usage_perc{" in text and "vllm:time_per_output_token_seconds_bucket{" in text
    assert "vllm:gpu_prefix_cache_queries_total{" in text and "vllm:kv_cache_usage_perc" not in text


def test_startup_log_matches_real_phases_and_kv_line(start_sim):
    sim = start_sim("Qwen/Qwen3-8B", "--max-model-len", "4096", "--enforce-eager")

    def phases(text: str) -> list:
        out: list = []
        for line in text.splitlines():
            p = phase_of(line)
            if p and (not out or out[-1] != p):
                out.append(p)
        return out

    ours = sim.text()
    real = phases(reference("startup.log"))  # a CPU build: no "Model loading took"/"Available KV cache" lines
    assert [p for p in phases(ours) if p in real] == real
    assert phases(ours) == [Phase.LOADING_WEIGHTS, Phase.PROFILING, Phase.KV_CACHE, Phase.API_UP]
    graphs = start_sim("Qwen/Qwen3-8B", "--max-model-len", "4096", env={"CUDA_VISIBLE_DEVICES": "1"})
    assert phases(graphs.text()) == [
        Phase.LOADING_WEIGHTS,
        Phase.PROFILING,
        Phase.KV_CACHE,
        Phase.CAPTURING_GRAPHS,
        Phase.API_UP,
    ]
    kv_line = re.compile(
        r"^\(EngineCore pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[kv_cache_utils\.py:\d+\] "
        r"[GC]PU KV cache size: [\d,]+ tokens, Maximum concurrency for [\d,]+ tokens per request: "
        r"[\d.]+x$",
        re.M,
    )
    assert kv_line.search(reference("startup.log")) and kv_line.search(ours)
    for shape in (
        r"non-default args: \{'model_tag': ",
        r"Using max model len \d+",
        r"Starting vLLM server on http://",
    ):
        assert re.search(shape, ours), shape
    from vtui.telemetry.startup_log import parse_startup

    facts_real, facts_ours = (
        parse_startup(reference("startup.log").splitlines()),
        parse_startup(ours.splitlines()),
    )
    for key in ("kv_cache_tokens", "max_model_len", "max_concurrency"):
        if getattr(facts_real, key, None) is not None:
            assert getattr(facts_ours, key) is not None, key


def test_streaming_chat_with_usage_and_api_key(start_sim):
    sim = start_sim("Qwen/Qwen3-8B", env={"VLLM_API_KEY": "s3cret"})
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 6,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    assert sim.post("/v1/chat/completions", body)[0] == 401
    assert sim.get("/health")[0] == 200
    status, raw = sim.post("/v1/chat/completions", body, {"authorization": "Bearer s3cret"})
    assert status == 200
    events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")) == 6
    assert (
        chunks[-1]["usage"]["completion_tokens"] == 6
        and chunks[-2]["choices"][0]["finish_reason"] == "length"
    )


def test_sigterm_exits_zero_quickly(start_sim):
    sim = start_sim("Qwen/Qwen3-8B")
    t0 = time.monotonic()
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.proc.wait(timeout=5) == 0
    assert time.monotonic() - t0 < 2


def failed(start_sim, *flags: str, model: str = "Qwen/Qwen3-8B", **kw) -> tuple[int, str]:
    sim = start_sim(model, *flags, healthy=False, **kw)
    return sim.proc.wait(timeout=20), sim.text()


def test_kv_too_small_for_max_model_len(start_sim):
    rc, text = failed(start_sim, "--max-model-len", "32768", "--kv-cache-memory-bytes", "1G")
    assert rc == 1
    cause = root_cause(text.splitlines())
    assert cause.startswith("ValueError: To serve at least one request with the model's max seq len (32768)")
    assert re.search(r"the estimated maximum model length is \d+\.", cause)


def test_no_memory_for_cache_blocks(start_sim):
    rc, text = failed(start_sim, "--gpu-memory-utilization", "0.1", model="Qwen/Qwen3-32B")
    assert rc == 1
    assert root_cause(text.splitlines()).startswith("ValueError: No available memory for the cache blocks.")
    assert "RuntimeError: Engine core initialization failed. See root cause above." in text


def test_max_model_len_above_model_limit(start_sim):
    rc, text = failed(start_sim, "--max-model-len", "100000")
    assert rc == 1
    assert root_cause(text.splitlines()).startswith(
        "User-specified max_model_len (100000) is greater than the derived max_model_len"
    )


def test_port_in_use(start_sim):
    first = start_sim("Qwen/Qwen3-8B", env={"CUDA_VISIBLE_DEVICES": "0"})
    rc, text = failed(start_sim, port=first.port, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert rc == 1 and root_cause(text.splitlines()) == "OSError: [Errno 98] Address already in use"


def test_shared_gpu_free_memory_check(start_sim):
    start_sim("Qwen/Qwen3-8B", "--gpu-memory-utilization", "0.5", env={"CUDA_VISIBLE_DEVICES": "3"})
    start_sim(
        "Qwen/Qwen2.5-0.5B-Instruct", "--gpu-memory-utilization", "0.45", env={"CUDA_VISIBLE_DEVICES": "3"}
    )
    rc, text = failed(start_sim, "--gpu-memory-utilization", "0.5", env={"CUDA_VISIBLE_DEVICES": "3,4"})
    assert rc == 1
    assert re.search(
        r"ValueError: Free memory on device cuda:0 \(4\.00/80\.00 GiB\) on startup is less than "
        r"desired GPU memory utilization \(0\.5, 40\.00 GiB\)",
        text,
    )


def test_unknown_flag_fails_like_vllm():
    proc = subprocess.run(
        [sys.executable, "-m", "vtui.sim", "m", "--foo", "3"], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert proc.stderr.rstrip().endswith("vllm: error: unrecognized arguments: --foo 3")
    real = reference("failures/unknown_flag.log")
    assert proc.stderr.splitlines()[0] == [ln for ln in real.splitlines() if ln.startswith("usage:")][0]


def test_engine_child_outlives_a_killed_parent(tmp_path):
    psutil = pytest.importorskip("psutil")
    sim = launch(tmp_path, "Qwen/Qwen3-8B", "--sim-engine-child")
    try:
        from .conftest import wait_healthy

        wait_healthy(sim)
        children = psutil.Process(sim.proc.pid).children()
        assert [c.name() for c in children] == ["VLLM::EngineCore"]
        assert children[0].cmdline()[0] == "VLLM::EngineCore"
        assert re.search(rf"\(EngineCore pid={children[0].pid}\)", sim.text())
        sim.proc.kill()
        sim.proc.wait(timeout=5)
        time.sleep(0.2)
        assert children[0].is_running() and children[0].status() != psutil.STATUS_ZOMBIE
    finally:
        import os

        try:
            os.killpg(sim.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _ = free_port


def test_every_family_of_real_vllm_is_there_http_and_python_included(start_sim):
    sim = start_sim("Qwen/Qwen3-8B", "--max-model-len", "512")
    body = json.dumps({"prompt": "hello " * 30, "max_tokens": 8}).encode()
    assert sim.post("/v1/completions", body)[0] == 200
    real = families(reference("metrics_preempt_busy.txt"))  # a payload after finished requests
    payload = sim.get("/metrics")[1].decode()
    ours = families(payload)
    assert sorted(n for n in real if n not in ours) == []
    assert {n: real[n][0] for n in real} == {n: ours[n][0] for n in real}  # same TYPE for every family
    for name in [n for n in real if n.startswith("http_")]:
        assert ours[name][1:] == real[name][1:], name  # same labels and buckets
    assert 'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 1.0' in payload
    assert f'http_request_size_bytes_sum{{handler="/v1/completions"}} {float(len(body))}' in payload
    assert "http_request_duration_highr_seconds_count 1.0" in payload
    order = [line.split()[2] for line in payload.splitlines() if line.startswith("# TYPE ")]
    real_order = [
        line.split()[2]
        for line in reference("metrics_preempt_busy.txt").splitlines()
        if line.startswith("# TYPE ") and line.split()[2] in ours
    ]
    assert [n for n in order if n in set(real_order)] == real_order  # the real payload's order
