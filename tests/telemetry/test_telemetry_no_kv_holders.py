"""`no_kv_memory` names the processes holding memory on the instance's GPUs when a GPU sample is given."""

from __future__ import annotations

from vtui.telemetry.diagnosis import diagnose
from vtui.telemetry.gpu import GpuProcess, GpuSample

GiB = 1 << 30
LINES = [
    "INFO non-default args: {'model': 'm', 'max_num_seqs': 128}",
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
]
SAMPLE = GpuSample(
    True,
    None,
    (),
    (
        GpuProcess(0, 4242, 30 * GiB, None),
        GpuProcess(0, 6000, 2 * GiB, "qwen"),  # this instance's own process: not a holder
        GpuProcess(1, 5151, 40 * GiB, "llama"),
        GpuProcess(1, 777, 1 * GiB, None),
    ),
    0.0,
)


def test_holders_on_the_instances_gpus_are_named_biggest_first() -> None:
    [p] = diagnose(LINES, gpu=SAMPLE, gpu_indices=[1], instance="qwen")
    assert p.kind == "no_kv_memory" and dict(p.fix) == {"max-num-seqs": 64, "enforce-eager": True}
    assert p.pids == (5151, 777)
    assert (
        "PID 5151 on GPU 1 (instance 'llama', 40.0 GiB); PID 777 on GPU 1 (other, 1.0 GiB)" in p.explanation
    )
    assert p.remedies[-1] == "stop PID 5151, PID 777 to free their memory"


def test_an_unpinned_instance_is_on_gpu_0_and_own_pids_are_left_out() -> None:
    [p] = diagnose(LINES, gpu=SAMPLE, gpu_indices=(), instance="qwen", own_pids={4242})
    assert p.pids == ()
    [p] = diagnose(LINES, gpu=SAMPLE, gpu_indices=(), instance="qwen")
    assert p.pids == (4242,) and "PID 4242 on GPU 0 (other, 30.0 GiB)" in p.explanation


def test_without_a_sample_nothing_changes() -> None:
    [with_none] = diagnose(LINES)
    [unavailable] = diagnose(LINES, gpu=GpuSample(False, "no NVML", (), (), 0.0), gpu_indices=[0])
    assert with_none == unavailable and with_none.pids == ()
    assert "Also on its GPU" not in with_none.explanation and not any(
        "stop PID" in r for r in with_none.remedies
    )
