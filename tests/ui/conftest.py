"""UI fixtures: a three-instance layout on the fake supervisor, a fixed clock, sample builders."""

from __future__ import annotations

import difflib
import pickle
import re
from dataclasses import replace

import pytest

from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.telemetry.gpu import GpuInfo, GpuProcess, GpuSample
from vtui.telemetry.metrics import MetricsSample, Percentiles
from vtui.testing.fake_supervisor import FakeSupervisor
from vtui.ui.app import make_app

NOW = 1_700_000_000.0
GIB = 2**30


def demo_layout(path=None) -> Layout:
    return Layout(
        SessionSpec("demo"),
        (
            InstanceSpec(
                "qwen",
                "Qwen/Qwen3-8B",
                8001,
                engine="sim",
                gpus=(0, 1),
                flags={
                    "tensor-parallel-size": 2,
                    "max-num-seqs": 256,
                    "max-model-len": 8192,
                    "gpu-memory-utilization": 0.9,
                },
            ),
            InstanceSpec(
                "llama",
                "meta-llama/Llama-3.1-8B-Instruct",
                8002,
                engine="sim",
                gpus=(2,),
                flags={"max-num-seqs": 128},
            ),
            InstanceSpec("embed", "BAAI/bge-m3", 8003, engine="sim", gpus=(3,)),
        ),
        path=path,
    )


def metrics(instance: str, at: float = NOW, **overrides) -> MetricsSample:
    base = dict(
        instance=instance,
        at=at,
        running=12.0,
        waiting=3.0,
        waiting_by_reason={},
        kv_usage=0.61,
        kv_capacity_tokens=20480,
        block_size=16,
        prompt_tps=1234.0,
        generation_tps=567.0,
        ttft=Percentiles(0.12, 0.45, 0.9),
        itl=Percentiles(0.02, 0.04, 0.05),
        e2e=Percentiles(1.0, 2.0, 3.0),
        queue=Percentiles(0.01, 0.05, 0.1),
        preemptions_per_s=0.0,
        prefix_hit_rate=0.45,
        success_per_s=4.0,
        abort_per_s=0.0,
        error_per_s=0.0,
        prompt_tokens_total=1e6,
        generation_tokens_total=5e5,
        preemptions_total=0.0,
        prefix_cache_queries_total=100.0,
        prefix_cache_hits_total=45.0,
        counter_reset=False,
        vllm_names="v1",
    )
    base.update(overrides)
    return MetricsSample(**base)


def gpu_sample(available: bool = True) -> GpuSample:
    if not available:
        return GpuSample(False, "no NVIDIA driver", (), (), NOW)
    gpus = tuple(
        GpuInfo(
            i,
            "NVIDIA H200",
            int(80 * GIB) if i < 3 else int(4 * GIB),
            int(141 * GIB),
            88.0 - i * 10,
            61.0 + i,
            420.0 - i * 30,
            700.0,
        )
        for i in range(4)
    )
    procs = (
        GpuProcess(0, 40000, int(76 * GIB), "qwen"),
        GpuProcess(1, 40001, int(76 * GIB), "qwen"),
        GpuProcess(2, 40002, int(70 * GIB), "llama"),
        GpuProcess(2, 999, int(6 * GIB), None, "python3 train.py --epochs 3"),  # "other", command read
    )
    return GpuSample(True, None, gpus, procs, NOW)


class FixedGpu:
    """A GPU 'sampler' that hands one fixed sample over on start (no thread)."""

    def __init__(self, sample: GpuSample):
        self.sample = sample

    def __call__(self, on_sample, pid_owner):
        self.on_sample = on_sample
        return self

    def start(self) -> None:
        self.on_sample(self.sample)

    def stop(self) -> None:
        pass


@pytest.fixture
def layout() -> Layout:
    return demo_layout()


@pytest.fixture
def fake(layout) -> FakeSupervisor:
    return FakeSupervisor(layout, clock=lambda: NOW - 3725)


@pytest.fixture
def app_factory():
    def build(supervisor, *, gpu=None, **kw):
        return make_app(
            supervisor=supervisor,
            gpu_sampler=FixedGpu(gpu or gpu_sample()),
            clock=lambda: NOW,
            **kw,
        )

    return build


__all__ = ["demo_layout", "metrics", "gpu_sample", "FixedGpu", "NOW", "replace"]


class _Helpers:
    NOW = NOW
    demo_layout = staticmethod(demo_layout)
    metrics = staticmethod(metrics)
    gpu_sample = staticmethod(gpu_sample)
    FixedGpu = FixedGpu


@pytest.fixture
def h() -> type[_Helpers]:
    """Sample builders for tests (conftest modules are not importable under --import-mode=importlib)."""
    return _Helpers


def _svg_parts(svg: str) -> list[str]:
    """The SVG's elements one per item, with the per-run id prefix (`terminal-123…`) taken out."""
    svg = re.sub(r"terminal-\d+", "terminal", svg)
    return [part.strip() for part in re.split(r">\s*<", svg) if part.strip()]


@pytest.fixture
def snap_compare(snap_compare, request):
    """pytest-textual-snapshot's fixture, printing the SVG elements that differ when a snapshot does not
    match: CI keeps only the test output, not the HTML report, and a rare mismatch is blind without them."""

    def compare(app, *args, **kwargs):
        ok = snap_compare(app, *args, **kwargs)
        if not ok:
            # imported here: the floors run has no pytest-textual-snapshot (it deselects snapshot tests)
            from pytest_textual_snapshot import node_to_report_path

            data = pickle.loads(node_to_report_path(request.node).read_bytes())
            expected, actual = _svg_parts(data[1]), _svg_parts(data[2])
            lines = list(difflib.unified_diff(expected, actual, "expected", "actual", n=1, lineterm=""))
            print(f"snapshot mismatch, {len(lines)} diff lines; the first 80:")
            print("\n".join(lines[:80]))
        return ok

    return compare
