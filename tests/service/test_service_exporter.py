"""The session exporter's text (service/exporter.py) from given payloads: each instance's `vllm:`
families relabelled with `instance`, HELP/TYPE once per family and each family's samples in one group
across instances, other families dropped, an `instance` label the server sent kept as
`exported_instance`, vtui's own series; read back by the project's parser and prometheus_client's. And
the endpoint over HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from vtui.core.model import InstanceSpec
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.service.exporter import CONTENT_TYPE, MetricsEndpoint, render
from vtui.telemetry.promtext import parse_metrics

PAYLOAD = """# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} RUNNING
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",instance="upstream"} 1.0
"""


def status(name: str, state: State, engine: str = "sim", restarts: int = 0) -> InstanceStatus:
    spec = InstanceSpec(name=name, model="m", port=8000, engine=engine)  # type: ignore[arg-type]
    return InstanceStatus(name, spec, state, None, None, None, restarts, None, Path("/x"), False, None, None)


def test_render_groups_relabels_and_adds_vtuis_own() -> None:
    statuses = [
        status("a", State.READY, restarts=2),
        status("b", State.READY),
        status("c", State.UNREACHABLE),
    ]
    texts = {"a": PAYLOAD.replace("RUNNING", "3.0"), "b": PAYLOAD.replace("RUNNING", "5.0")}
    gpu = {
        "available": True,
        "gpus": [{"index": 0, "memory_used": 300, "memory_total": 1000}],
        "processes": [
            {"gpu_index": 0, "pid": 1, "used_memory": 100, "instance": "a"},
            {"gpu_index": 0, "pid": 2, "used_memory": 50, "instance": "a"},
            {"gpu_index": 0, "pid": 3, "used_memory": 150, "instance": None},
        ],
    }
    text = render(statuses, texts, up={"a": True, "b": True}, gpu=gpu)
    lines = text.splitlines()
    assert "python_gc" not in text  # only vllm: families (and vtui's)
    for family in ("vllm:num_requests_running", "vllm:time_to_first_token_seconds", "vtui_instance_state"):
        assert lines.count(f"# TYPE {family} " + ("histogram" if "seconds" in family else "gauge")) == 1
    # each family's samples follow its TYPE line as one group, both instances in it
    at = lines.index("# TYPE vllm:num_requests_running gauge")
    assert lines[at + 1 : at + 3] == [
        'vllm:num_requests_running{instance="a",engine="0",model_name="m"} 3.0',
        'vllm:num_requests_running{instance="b",engine="0",model_name="m"} 5.0',
    ]
    assert 'vllm:cache_config_info{instance="a",block_size="16",exported_instance="upstream"} 1.0' in lines

    snap = parse_metrics(text)  # the project's reader
    assert snap.malformed == 0
    assert snap.by_label("vllm:num_requests_running", "instance") == {"a": 3.0, "b": 5.0}
    assert snap.histogram("vllm:time_to_first_token_seconds").count == 8.0  # both instances' observations

    parser = pytest.importorskip("prometheus_client.parser")
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    state = {
        (s.labels["instance"], s.labels["state"]): s.value for s in families["vtui_instance_state"].samples
    }
    assert state[("a", "ready")] == state[("c", "unreachable")] == 1.0
    assert sum(state.values()) == 3 and len(state) == 3 * len(State)
    restarts = {s.labels["instance"]: s.value for s in families["vtui_instance_restarts"].samples}
    assert restarts == {"a": 2.0, "b": 0.0, "c": 0.0}
    up = {s.labels["instance"]: s.value for s in families["vtui_instance_up"].samples}
    assert up == {"a": 1.0, "b": 1.0, "c": 0.0}
    held = {
        (s.labels["instance"], s.labels["gpu"]): s.value
        for s in families["vtui_instance_gpu_memory_bytes"].samples
    }
    assert held == {("a", "0"): 150.0}  # its two processes; the stranger's memory is no instance's
    ttft = families["vllm:time_to_first_token_seconds"]
    assert ttft.type == "histogram" and {s.labels["instance"] for s in ttft.samples} == {"a", "b"}
    assert families["vllm:prompt_tokens"].type == "counter"


async def test_the_endpoint_serves_it_and_nothing_else() -> None:
    calls = []

    async def body() -> str:
        calls.append(1)
        return render([status("a", State.READY)], {"a": PAYLOAD.replace("RUNNING", "1.0")})

    endpoint = MetricsEndpoint("127.0.0.1", 0, body)
    await endpoint.start()
    try:
        port = endpoint._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        async with httpx.AsyncClient(trust_env=False) as client:
            first = await client.get(f"http://127.0.0.1:{port}/metrics")
            second = await client.get(f"http://127.0.0.1:{port}/metrics")  # same keep-alive connection
            other = await client.get(f"http://127.0.0.1:{port}/")
        assert (
            first.status_code == second.status_code == 200 and first.headers["content-type"] == CONTENT_TYPE
        )
        assert 'vllm:num_requests_running{instance="a"' in first.text and len(calls) == 2
        assert other.status_code == 404
    finally:
        await endpoint.stop()
    await asyncio.sleep(0)


def test_a_real_vllm_payload_keeps_every_vllm_sample_per_instance() -> None:
    """vLLM 0.32's own /metrics (tests/telemetry/fixtures/metrics_busy.txt), two instances of it: every
    `vllm:` sample of the payload appears once per instance, with its labels, and nothing else of it."""
    parser = pytest.importorskip("prometheus_client.parser")
    payload = (Path(__file__).parents[1] / "telemetry" / "fixtures" / "metrics_busy.txt").read_text()

    def samples(text: str) -> list[tuple[str, frozenset, float]]:
        return sorted(
            (s.name, frozenset(s.labels.items()), s.value)
            for fam in parser.text_string_to_metric_families(text)
            for s in fam.samples
            if s.name.startswith("vllm:")
        )

    text = render([status("a", State.READY), status("b", State.READY)], {"a": payload, "b": payload})
    original = samples(payload)
    assert len(original) > 100
    for name in ("a", "b"):
        mine = [
            (n, frozenset((k, v) for k, v in labels if k != "instance"), value)
            for n, labels, value in samples(text)
            if ("instance", name) in labels
        ]
        assert sorted(mine) == original
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(families) == len(set(families))


def test_a_routers_own_series_are_passed_on_with_its_instance() -> None:
    """vllm-router 0.1.17's Prometheus payload (captured): its `vllm_router_*` families appear under
    the router's instance name, each sample of them once, TYPE once per family."""
    parser = pytest.importorskip("prometheus_client.parser")
    fixtures = Path(__file__).parents[1] / "telemetry" / "fixtures"
    payload = (fixtures / "metrics_router_0.1.17.txt").read_text()
    text = render(
        [status("chat-router", State.READY, engine="router"), status("chat-0", State.READY)],
        {"chat-router": payload, "chat-0": PAYLOAD.replace("RUNNING", "2.0")},
    )

    def samples(body: str) -> list[tuple[str, frozenset, float]]:
        return sorted(
            (s.name, frozenset(s.labels.items()), s.value)
            for fam in parser.text_string_to_metric_families(body)
            for s in fam.samples
            if s.name.startswith("vllm_router_")
        )

    original = samples(payload)
    assert len(original) > 30
    assert samples(text) == sorted(
        (n, labels | {("instance", "chat-router")}, v) for n, labels, v in original
    )
    assert (
        'vllm_router_processed_requests_total{instance="chat-router",worker="http://127.0.0.1:18200"} 5'
        in text
    )
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert "vllm_router_generate_duration_seconds" in families and len(families) == len(set(families))
