"""Real-GPU fixtures: skip unless NVML lists devices and torch sees CUDA; sim instances holding real CUDA
memory (`--sim-device cuda`) started by vtui's Supervisor; NVML samples attributed through vtui's process
trees; the measured figures written to $VTUI_GPU_ARTIFACTS/gpu-figures.json (or the test's tmp dir)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from vtui.core.model import InstanceSpec, Layout, RestartPolicy, SessionSpec
from vtui.core.state import State
from vtui.core.supervisor import Supervisor
from vtui.telemetry.gpu import GpuSample, GpuSampler

GIB = 1 << 30
MODEL = "Qwen/Qwen3-8B"


def _nvml_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library, no driver: no GPUs
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001
        return 0
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _torch_cuda_count() -> int:
    """torch's CUDA device count, asked in a child so this process never makes a CUDA context."""
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return int(out.stdout.strip() or 0) if out.returncode == 0 else 0


_COUNT: int | None = None


@pytest.fixture(scope="session")
def gpu_count() -> int:
    """GPUs usable here (NVML and torch agree); skips the test when there are none."""
    global _COUNT
    if _COUNT is None:
        _COUNT = min(_nvml_count(), _torch_cuda_count()) if _nvml_count() else 0
    if _COUNT == 0:
        pytest.skip("no NVIDIA GPU (NVML lists no device, or torch.cuda is unavailable)")
    return _COUNT


@pytest.fixture
def two_gpus(gpu_count: int) -> int:
    if gpu_count < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {gpu_count}")
    return gpu_count


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sim(
    name: str,
    gpus: tuple[int, ...],
    util: float,
    *,
    model: str = MODEL,
    child: bool = True,
    scale: float = 0.5,
    **flags: object,
) -> InstanceSpec:
    """A sim instance holding real CUDA memory; never restarted (a failure stays visible)."""
    all_flags: dict[str, object] = {
        "gpu-memory-utilization": util,
        "max-model-len": 8192,
        "sim-device": "cuda",
        "sim-startup-scale": scale,
        "sim-stats-interval": 3600.0,
    }
    if child:
        all_flags["sim-engine-child"] = True
    all_flags.update({k.replace("_", "-"): v for k, v in flags.items()})
    if "tensor-parallel-size" not in all_flags and len(gpus) > 1:
        all_flags["tensor-parallel-size"] = len(gpus)
    return InstanceSpec(
        name,
        model,
        free_port(),
        engine="sim",
        gpus=gpus,
        flags=all_flags,
        restart=RestartPolicy(mode="never"),
    )


def layout(session: str, *specs: InstanceSpec, share: bool = False) -> Layout:
    return Layout(SessionSpec(session, allow_gpu_sharing=share), specs)


@contextlib.asynccontextmanager
async def supervising(lay: Layout) -> AsyncIterator[Supervisor]:
    """A Supervisor on `lay` whose instances are always stopped (and swept) at the end."""
    sup = Supervisor(lay, stop_grace=5.0)
    try:
        yield sup
    finally:
        await sup.close(stop_instances=True)


def owners(*sups: Supervisor) -> dict[int, str]:
    """pid -> instance over every running instance's process tree (what the UI's bridge hands NVML)."""
    out: dict[int, str] = {}
    for sup in sups:
        for st in sup.status():
            if st.state.running:
                for pid in sup.pids_of(st.name):
                    out[pid] = st.name
    return out


def sample(*sups: Supervisor) -> GpuSample:
    sampler = GpuSampler(lambda s: None, pid_owner=lambda: owners(*sups))
    try:
        got = sampler.sample_once()
    finally:
        sampler.stop()
    assert got.available, got.reason
    return got


def held_by(got: GpuSample, instance: str, gpu: int | None = None) -> dict[int, int]:
    """pid -> bytes that NVML shows for `instance` (on `gpu`, or anywhere)."""
    return {
        p.pid: p.used_memory or 0
        for p in got.processes
        if p.instance == instance and (gpu is None or p.gpu_index == gpu)
    }


def kv_gib(lines: Iterable[str]) -> float | None:
    for line in lines:
        if "Available KV cache memory:" in line:
            return float(line.rsplit(":", 1)[1].split()[0])
    return None


async def settle(sup: Supervisor, timeout: float = 180.0) -> dict[str, State]:
    return await sup.wait_settled(timeout=timeout)


class Figures:
    """Measured figures, merged into one JSON file per run (the report's numbers come from it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, section: str, **values: object) -> None:
        data = json.loads(self.path.read_text()) if self.path.exists() else {}
        data.setdefault(section, {}).update(values)
        self.path.write_text(json.dumps(data, indent=2, default=str))


def artifacts_dir(tmp_path: Path) -> Path:
    env = os.environ.get("VTUI_GPU_ARTIFACTS")
    path = Path(env) if env else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def figures(tmp_path: Path) -> Figures:
    return Figures(artifacts_dir(tmp_path) / "gpu-figures.json")


def wait_until(predicate, timeout: float, step: float = 0.05) -> float | None:
    """Seconds until `predicate()` held, or None after `timeout`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(step)
    return None


@pytest.fixture
def gh():
    """These helpers, for the test modules (importlib mode: conftest is not importable by name)."""
    return sys.modules[__name__]
