"""Real-GPU fixtures: skip unless NVML lists devices and torch sees CUDA; sim instances holding real CUDA
memory (`--sim-device cuda`) started by vtui's Supervisor; NVML samples attributed through vtui's process
trees; the measured figures written to $VTUI_GPU_ARTIFACTS/gpu-figures.json (or the test's tmp dir).

The session-supervisor tests (`vtui up/ps/down/sleep/wake` as a user runs them) take the `gpus` fixture:
NVML read directly (pynvml) and processes of the test's own holding CUDA memory (torch). With
VTUI_GPU_DRY=1 and no GPU, `gpus` is the simulated GPU registry instead (the sims on `--sim-device sim`,
the holders claiming registry memory): a dry run of those tests' logic on a machine without a GPU. It
proves nothing about GPUs; its figures are marked `"backend": "dry"`."""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from vtui.core.model import InstanceSpec, Layout, RestartPolicy, SessionSpec
from vtui.core.state import State
from vtui.supervisor.supervisor import Supervisor
from vtui.telemetry.gpu import GpuSample, GpuSampler

GIB = 1 << 30
MODEL = "Qwen/Qwen3-8B"


def _nvml_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 — no library, no driver: no GPUs
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001 — pynvml.NVMLError or a ctypes error: no GPUs
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
    sampler = GpuSampler(lambda s: None, owners=lambda pids: owners(*sups))
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


# -- the session-supervisor tests: the GPUs as NVML lists them, and vtui run as a user runs it ----------


@dataclass(frozen=True)
class Reading:
    """One look at the GPUs: (used, total) bytes per GPU, and every compute process, (gpu, pid) -> bytes
    (None: the driver does not say)."""

    gpus: tuple[tuple[int, int], ...]
    processes: dict[tuple[int, int], int | None]

    def used(self, gpu: int = 0) -> int:
        return self.gpus[gpu][0]

    def total(self, gpu: int = 0) -> int:
        return self.gpus[gpu][1]

    def pids(self, gpu: int | None = None) -> set[int]:
        return {pid for g, pid in self.processes if gpu is None or g == gpu}

    def held(self, pids: Iterable[int], gpu: int | None = None) -> int:
        """Bytes these processes hold (on `gpu`, or anywhere)."""
        wanted = set(pids)
        return sum(
            n or 0 for (g, pid), n in self.processes.items() if pid in wanted and (gpu is None or g == gpu)
        )


HOLD_CUDA = (
    "import sys, time, torch\n"
    "x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device='cuda'); torch.cuda.synchronize()\n"
    "print('ready', flush=True); time.sleep(3600)\n"
)
HOLD_DRY = (
    "import os, sys, time\nfrom vtui.sim.gpus import GpuRegistry\n"
    "GpuRegistry().claim(os.getpid(), [int(sys.argv[2])], int(sys.argv[1]))\n"
    "print('ready', flush=True); time.sleep(3600)\n"
)


class NvmlGpus:
    """The real GPUs: NVML read directly (not through vtui), holders allocating CUDA memory with torch."""

    kind = "nvml"
    flags: dict[str, object] = {"sim-device": "cuda"}  # the sims hold real CUDA memory
    hold_code = HOLD_CUDA

    def __init__(self, count: int) -> None:
        self.count = count

    def read(self) -> Reading:
        import pynvml

        pynvml.nvmlInit()
        try:
            gpus, processes = [], {}
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                try:  # nvidia-smi's "used" (v2), as vtui's sampler reads it
                    mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
                except (pynvml.NVMLError, TypeError, AttributeError):
                    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
                gpus.append((int(mem.used), int(mem.total)))
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    used = getattr(proc, "usedGpuMemory", None)
                    processes[(index, int(proc.pid))] = int(used) if used is not None else None
            return Reading(tuple(gpus), processes)
        finally:
            pynvml.nvmlShutdown()

    @contextlib.contextmanager
    def holding(self, nbytes: int, gpu: int = 0) -> Iterator[subprocess.Popen[str]]:
        """A process vtui did not start, holding `nbytes` on `gpu` until the block ends (killed even on
        failure)."""
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu))
        proc = subprocess.Popen(
            [sys.executable, "-c", self.hold_code, str(int(nbytes)), str(gpu)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], 120.0)
            line = proc.stdout.readline().strip() if ready else ""
            assert line == "ready", f"the holder did not take its memory (exit {proc.poll()}, said {line!r})"
            yield proc
        finally:
            proc.kill()
            proc.wait(30)


class DryGpus(NvmlGpus):
    """No GPU (VTUI_GPU_DRY=1): the simulated GPU registry stands in for NVML, to dry-run the tests'
    logic. Two simulated H200-sized GPUs."""

    kind = "dry"
    gib = 141.0
    hold_code = HOLD_DRY

    def __init__(self, count: int = 2) -> None:
        super().__init__(count)
        self.flags = {"sim-num-gpus": count, "sim-gpu-memory-gib": self.gib}

    def read(self) -> Reading:
        from vtui.sim.gpuview import SimulatedGpus

        got = SimulatedGpus(self.count, self.gib)({})
        return Reading(
            tuple((g.memory_used or 0, g.memory_total or 0) for g in got.gpus),
            {(p.gpu_index, p.pid): p.used_memory for p in got.processes},
        )


@pytest.fixture
def gpus(request: pytest.FixtureRequest) -> NvmlGpus:
    """The GPUs the session-supervisor tests read (NVML; skips without GPUs), or with VTUI_GPU_DRY=1 on a
    machine without one, the simulated registry."""
    if os.environ.get("VTUI_GPU_DRY") == "1" and not _nvml_count():
        return DryGpus()
    return NvmlGpus(request.getfixturevalue("gpu_count"))


def quiet(gpus: NvmlGpus, timeout: float = 20.0) -> Reading:
    """The GPUs once no live process holds memory on them (an earlier test's may still be exiting), or
    as they are after `timeout`: the baseline a test measures against."""
    from _support.procs import alive

    wait_until(lambda: not [pid for _, pid in gpus.read().processes if alive(pid)], timeout, 0.25)
    return gpus.read()


def sim_entry(
    gpus: NvmlGpus,
    name: str,
    gpu_ids: list[int],
    util: float,
    *,
    child: bool = True,
    scale: float = 0.5,
    model: str = MODEL,
    **keys: object,
) -> dict[str, object]:
    """A layout file's [[instance]]: a sim holding memory on `gpu_ids` (real CUDA memory, in its
    VLLM::EngineCore child when `child`), never restarted; `keys`: more instance keys."""
    flags: dict[str, object] = {
        "gpu-memory-utilization": util,
        "max-model-len": 8192,
        "sim-startup-scale": scale,
        "sim-stats-interval": 3600.0,
        **gpus.flags,
    }
    if child:
        flags["sim-engine-child"] = True
    return {
        "name": name,
        "engine": "sim",
        "model": model,
        "port": free_port(),
        "gpus": gpu_ids,
        "restart": "never",
        "flags": flags,
        **keys,
    }


def write_layout(folder: Path, entries: list[dict[str, object]], *, share: bool = True) -> tuple[Path, str]:
    """The layout file of a new session (a unique name); (path, session)."""
    import tomli_w

    session = f"g{uuid.uuid4().hex[:8]}"
    path = folder / f"{session}.toml"
    data = {"session": {"name": session, "allow_gpu_sharing": share}, "instance": entries}
    path.write_text(tomli_w.dumps(data))
    return path, session


def vtui(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """`python -m vtui ARGS` in a child process, as a user runs it (it finds or starts the session's
    supervisor)."""
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )


def said(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"


def ps_rows(path: Path) -> dict[str, dict]:
    result = vtui("ps", str(path), "--json", timeout=120)
    assert result.returncode == 0, said(result)
    return {row["name"]: row for row in json.loads(result.stdout)}


@contextlib.contextmanager
def brought_down(path: Path) -> Iterator[None]:
    """`vtui down` of the session at the end, also on failure (tests/conftest.py then kills whatever
    of the test's state dir still runs)."""
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            vtui("down", str(path), timeout=120)


def instance_pids(session: str) -> dict[str, set[int]]:
    """Every live process of each running instance, as the session supervisor knows them."""
    from vtui.service.client import ServiceClient

    answer = ServiceClient(session).get("/pids", timeout=30.0)
    return {name: set(pids) for name, pids in (answer.get("pids") or {}).items()}


def healthy(port: int) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def complete(port: int, model: str = MODEL, prompt: str = "hello there") -> dict:
    """One completion from the server on `port` (asserts it answered 200)."""
    import httpx

    answer = httpx.post(
        f"http://127.0.0.1:{port}/v1/completions",
        json={"model": model, "prompt": prompt, "max_tokens": 4},
        timeout=60,
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["choices"], body
    return body


def mib(nbytes: float | None) -> float | None:
    return None if nbytes is None else round(nbytes / 2**20, 1)


@pytest.fixture
def gh():
    """These helpers, for the test modules (importlib mode: conftest is not importable by name)."""
    return sys.modules[__name__]
