"""Preflight rules with an injected NVML and core count (no GPUs needed)."""

from __future__ import annotations

from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.supervisor.preflight import preflight

from .conftest import free_port


class FakeNvml:
    """pynvml's count, and nothing known of each GPU (NVMLError: unsupported)."""

    NVMLError = RuntimeError

    def __init__(self, count: int | None) -> None:
        self.count = count

    def __getattr__(self, name: str):
        def unsupported(*_a, **_kw):
            raise RuntimeError(f"{name}: not supported")

        return unsupported

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlInit(self) -> None:
        if self.count is None:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlShutdown(self) -> None:
        pass


def lay(*gpu_sets, share=False, host="127.0.0.1", engine="vllm") -> Layout:
    specs = [
        InstanceSpec(name=f"i{n}", model="m", port=free_port(), gpus=g, host=host, engine=engine)
        for n, g in enumerate(gpu_sets)
    ]
    return Layout(SessionSpec(name="s", allow_gpu_sharing=share), tuple(specs))


def test_missing_gpu_and_overlap_are_refused():
    result = preflight(lay((0, 1), (1,), (4,)), nvml=FakeNvml(2), cpu_count=64)
    assert result.problems == [
        'instance "i2": GPU 4 not present (this machine has GPUs 0-1)',
        'instances "i0" and "i1" both use GPU 1 (set session.allow_gpu_sharing = true to share)',
    ]


def test_sharing_allowed_and_no_nvml_is_only_a_note():
    result = preflight(lay((0,), (0,), share=True), nvml=FakeNvml(None), cpu_count=64)
    assert result.problems == [] and result.notes[0].startswith("GPU checks skipped: no NVIDIA driver")


def test_too_few_cores_is_a_warning_counting_running_instances():
    layout = lay((0,), (1,))
    result = preflight(layout, ["i1"], running=["i0"], nvml=FakeNvml(2), cpu_count=4)
    assert result.problems == []
    assert result.warnings == ["too few CPU cores: 2 instance(s) want 6 (2 + GPUs each), this machine has 4"]


def test_public_bind_is_a_warning_and_running_instances_are_not_rechecked():
    layout = lay((), host="0.0.0.0")
    assert "reachable from other machines" in preflight(layout, cpu_count=8).warnings[0]
    assert preflight(layout, running=["i0"], cpu_count=8) == preflight(Layout(SessionSpec(), ()))


def test_sim_instances_ask_no_cores_of_their_own():
    assert not [w for w in preflight(lay((0,), (1,), engine="sim"), cpu_count=2).warnings if "CPU" in w]
    mixed = Layout(
        SessionSpec(name="s"),
        (
            InstanceSpec(name="v", model="m", port=free_port(), gpus=(0,)),
            InstanceSpec(name="sim", model="m", port=free_port(), gpus=(1,), engine="sim"),
        ),
    )
    assert preflight(mixed, nvml=FakeNvml(2), cpu_count=2).warnings == [
        "too few CPU cores: 1 instance(s) want 3 (2 + GPUs each), this machine has 2"
    ]


def test_unpinned_instances_warn_that_they_share_gpu_0():
    def unpinned(result):
        return [w for w in result.warnings if "set no gpus" in w]

    # Real vLLM: only on a machine with GPUs (a CPU build has none to share).
    assert unpinned(preflight(lay((), ()), nvml=FakeNvml(2), cpu_count=64)) == [
        'instances "i0", "i1" set no gpus, so all run on GPU 0 (vLLM and the sim take the first visible GPU) '
        "and start one after another; give each its own gpus = [N] to spread them"
    ]
    assert unpinned(preflight(lay((), ()), nvml=FakeNvml(None), cpu_count=64)) == []
    assert unpinned(preflight(lay((), ()), nvml=FakeNvml(0), cpu_count=64)) == []
    # Sims: always (the simulated GPU 0), with no NVML at all.
    assert len(unpinned(preflight(lay((), (), engine="sim"), nvml=FakeNvml(None), cpu_count=64))) == 1
    # One unpinned instance, or unpinned ones all already running: nothing to say.
    assert unpinned(preflight(lay((), (1,), engine="sim"), nvml=FakeNvml(2), cpu_count=64)) == []
    assert (
        unpinned(
            preflight(
                lay((), (), (1,), engine="sim"), ["i2"], running=["i0", "i1"], nvml=FakeNvml(2), cpu_count=64
            )
        )
        == []
    )
    assert preflight(lay((), ()), nvml=FakeNvml(None), cpu_count=64).notes == []  # no note without pinning
