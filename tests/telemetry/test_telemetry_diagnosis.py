"""Failure lines → problems with concrete fixes, for every real failure captured from vLLM 0.32 (tests/telemetry/fixtures/failures) and
hand-written older/GPU ones; the runtime "KV cache short" rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from vtui.telemetry.diagnosis import diagnose
from vtui.telemetry.gpu import GpuProcess, GpuSample
from vtui.telemetry.kvshort import KvShortWatch, diagnose_runtime
from vtui.telemetry.metrics import MetricsSample

FIXTURES = Path(__file__).parent / "fixtures"
GiB = 1024**3

# Every failure log, real (failures/) and hand-written (logs/): its one problem and fix.
EXPECTED = {
    "failures/default_kv_alone.log": ("free_memory_below_utilization", {"gpu-memory-utilization": 0.84}),
    "failures/kv_too_small.log": ("no_kv_memory", {"kv-cache-memory-bytes": 64 * 1024**2}),
    "failures/max_model_len_too_big.log": ("max_model_len_above_model", {"max-model-len": 2048}),
    "failures/missing_model.log": ("model_not_found", None),
    "failures/port_in_use.log": ("port_in_use", "port"),
    "failures/unknown_flag.log": ("unknown_flag", None),
    "logs/v1_0.10_kv_too_small.log": ("kv_too_small_for_max_model_len", {"max-model-len": 71824}),
    "logs/v1_0.8_kv_too_small_no_estimate.log": ("kv_too_small_for_max_model_len", {"max-model-len": 435584}),
    "logs/v0_0.6_kv_too_small.log": ("kv_too_small_for_max_model_len", {"max-model-len": 23648}),
    "logs/v1_free_memory.log": ("free_memory_below_utilization", {"gpu-memory-utilization": 0.15}),
    "logs/v1_cuda_oom_graphs.log": ("cuda_oom", {"enforce-eager": True}),
    "logs/v0_cuda_oom_profile.log": ("cuda_oom", {"gpu-memory-utilization": 0.85}),
    "logs/v0_max_model_len_above_model.log": ("max_model_len_above_model", {"max-model-len": 4096}),
    "logs/v0_port_in_use_uvicorn.log": ("port_in_use", "port"),
    "logs/bad_flag_value.log": ("invalid_flag_value", None),
    "logs/v0_preemption_warning.log": ("kv_cache_short", None),
}


def test_every_real_failure_is_covered() -> None:
    real = {f"failures/{p.name}" for p in (FIXTURES / "failures").glob("*.log")}
    assert real and real <= set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_failure(name: str, fixture_text) -> None:
    kind, fix = EXPECTED[name]
    problems = diagnose(fixture_text(name).splitlines(), holders_of_port=lambda port: [])
    assert [p.kind for p in problems] == [kind]
    problem = problems[0]
    assert problem.message and problem.explanation
    if fix == "port":
        assert set(problem.fix) == {"port"}
    else:
        assert (dict(problem.fix) if problem.fix is not None else None) == fix
    assert problem.to_json() == {
        "kind": kind,
        "message": problem.message,
        "fix": dict(problem.fix) if problem.fix is not None else None,
    }


@pytest.mark.parametrize(
    "name", ["startup.log", "startup_preempt_run.log", "logs/v0_0.6.4.log", "logs/v1_0.10.1_tp2.log"]
)
def test_healthy_logs_have_no_problems(name: str, fixture_text) -> None:
    assert diagnose(fixture_text(name).splitlines()) == []


def test_messages_quote_vllm(fixture_text) -> None:
    [unknown] = diagnose(fixture_text("failures/unknown_flag.log").splitlines())
    assert unknown.message == "vllm: error: unrecognized arguments: --foo-bar 3"
    [missing] = diagnose(fixture_text("failures/missing_model.log").splitlines())
    assert missing.message.startswith("HFValidationError: Repo id must be in the form")


def test_unknown_flag_suggests_the_close_one() -> None:
    pytest.importorskip("vtui.core.flagspec")
    [p] = diagnose(["vllm: error: unrecognized arguments: --max-num-seq 4"])
    assert any("--max-num-seqs" in r for r in p.remedies)


def test_port_in_use_names_the_holder(fixture_text) -> None:
    [p] = diagnose(
        fixture_text("failures/port_in_use.log").splitlines(),
        holders_of_port=lambda port: [(4242, "python3")] if port == 18001 else [],
    )
    assert p.message == "port 18001 is already in use by PID 4242 (python3)"
    assert p.pids == (4242,) and p.fix["port"] > 18001


def test_port_in_use_finds_a_real_listener() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        [p] = diagnose(
            [
                f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
                "address already in use"
            ]
        )
    assert f"port {port}" in p.message
    import os

    if p.pids:  # psutil may not see sockets without privileges; when it does, it is us
        assert p.pids == (os.getpid(),)


def test_free_memory_names_the_processes_on_those_gpus(fixture_text) -> None:
    gpu = GpuSample(
        True,
        None,
        (),
        (
            GpuProcess(0, 4242, 60 * GiB, None),
            GpuProcess(0, 5151, 5 * GiB, "llama"),
            GpuProcess(0, 6000, 1 * GiB, "qwen"),  # this instance's own leftover: not a "holder"
            GpuProcess(1, 7777, 70 * GiB, None),  # another GPU
        ),
        0.0,
    )
    [p] = diagnose(
        fixture_text("logs/v1_free_memory.log").splitlines(), gpu=gpu, gpu_indices=[0], instance="qwen"
    )
    assert p.pids == (4242, 5151)
    assert "PID 4242 on GPU 0 (other, 60.0 GiB)" in p.explanation
    assert "PID 5151 on GPU 0 (instance 'llama', 5.0 GiB)" in p.explanation
    assert p.remedies[0] == "stop PID 4242, PID 5151"


def test_oom_ignores_vllms_own_pids(fixture_text) -> None:
    [p] = diagnose(fixture_text("logs/v1_cuda_oom_graphs.log").splitlines())
    assert "PID 950" not in p.explanation  # 950 is the EngineCore itself
    [p] = diagnose(fixture_text("logs/v0_cuda_oom_profile.log").splitlines())
    assert "PID 31337 holds 6.00 GiB" in p.explanation


def test_no_kv_memory_without_explicit_bytes() -> None:
    lines = [
        "INFO non-default args: {'model': 'm', 'max_num_seqs': 128}",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
    ]
    [p] = diagnose(lines)
    assert dict(p.fix) == {"max-num-seqs": 64, "enforce-eager": True}
    lines[0] = "INFO non-default args: {'model': 'm', 'gpu_memory_utilization': 0.5}"
    [p] = diagnose(lines)
    assert dict(p.fix) == {"gpu-memory-utilization": 0.9}


def test_unrecognised_failure_falls_back_to_the_root_cause() -> None:
    lines = [
        "(EngineCore_DP0 pid=5) ERROR 01-01 00:00:00 [core.py:1] EngineCore failed to start.",
        "(EngineCore_DP0 pid=5) ERROR 01-01 00:00:00 [core.py:1] RuntimeError: NCCL error: unhandled system error",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ]
    [p] = diagnose(lines)
    assert (p.kind, p.fix) == ("startup_failed", None)
    assert p.message == "RuntimeError: NCCL error: unhandled system error"


def test_a_start_failing_in_error_records_first_on_their_line_names_the_failing_line() -> None:
    # no exception line in the paste: the failing record itself, not a traceback frame, is the cause
    lines = [
        "INFO 12-17 10:47:04 [gpu_model_runner.py:1347] Model loading took 2.5521 GiB and 6.006044 seconds",
        "ERROR 12-17 10:47:07 [core.py:396] EngineCore failed to start.",
        "ERROR 12-17 10:47:07 [core.py:396] Traceback (most recent call last):",
        'ERROR 12-17 10:47:07 [core.py:396]   File "/opt/venv/vllm/v1/engine/core.py", line 387, in run_engine_core',
    ]
    [p] = diagnose(lines, holders_of_port=lambda _port: [])
    assert (p.kind, p.message) == (
        "startup_failed",
        "ERROR 12-17 10:47:07 [core.py:396] EngineCore failed to start.",
    )


def test_a_dead_worker_during_startup_is_a_failed_start() -> None:
    line = (
        "(EngineCore_DP0 pid=3752) ERROR 09-15 13:59:18 [multiproc_executor.py:149] Worker proc VllmWorker-1 "
        "died unexpectedly, shutting down executor."
    )
    [p] = diagnose([line], holders_of_port=lambda _port: [])
    assert p.kind == "startup_failed" and "died unexpectedly" in p.message


def test_a_free_memory_error_wrapped_by_a_paste_is_read_whole() -> None:
    lines = [
        "    ValueError: Free memory on device cuda:0 (1.33/23.98 GiB) on startup is less",
        "    than desired GPU memory utilization (0.95, 22.79 GiB).",
    ]
    [p] = diagnose(lines, holders_of_port=lambda _port: [])
    assert p.kind == "free_memory_below_utilization"
    assert "on startup is less than desired GPU memory utilization (0.95, 22.79 GiB)" in p.message
    assert "Only 1.33 GiB of 23.98 GiB is free on GPU cuda:0" in p.explanation


def test_a_v0_kv_message_cut_before_its_capacity_has_no_fix() -> None:
    line = (
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
        "stored in KV cache ("
    )
    [p] = diagnose([line], holders_of_port=lambda _port: [])
    assert (p.kind, p.fix) == ("kv_too_small_for_max_model_len", None)


def _sample(
    at: float,
    kv: float | None,
    waiting: float | None,
    preempt_total: float | None,
    preempt_rate: float | None = None,
    running: float | None = 4.0,
) -> MetricsSample:
    return MetricsSample(
        instance="a",
        at=at,
        kv_usage=kv,
        waiting=waiting,
        running=running,
        preemptions_total=preempt_total,
        preemptions_per_s=preempt_rate,
    )


def test_runtime_kv_cache_short() -> None:
    history = [_sample(0.0, 0.9, 0.0, 0.0), _sample(1.0, 1.0, 7.0, 3.0)]
    now = _sample(2.0, 1.0, 7.0, 7.0, preempt_rate=4.0)
    [p] = diagnose_runtime(now, history)
    assert p.kind == "kv_cache_short" and p.fix is None
    assert p.message == "KV cache 100% full, 7 waiting, 4.0 preemptions/s"
    assert [r.split()[1] for r in p.remedies[:4]] == [
        "--max-model-len",
        "--gpu-memory-utilization",
        "--max-num-seqs",
        "--kv-cache-dtype",
    ]


@pytest.mark.parametrize(
    ("flags", "fix"),
    [
        ({"max-model-len": 32768}, {"max-model-len": 16384}),
        ({"max-model-len": 8192}, {"gpu-memory-utilization": 0.92}),
        ({"max-model-len": 8192, "gpu-memory-utilization": 0.95, "max-num-seqs": 256}, {"max-num-seqs": 4}),
        ({"gpu-memory-utilization": 0.95, "max-num-seqs": 4}, {"kv-cache-dtype": "fp8"}),
        ({"gpu-memory-utilization": 0.95, "max-num-seqs": 4, "kv-cache-dtype": "fp8"}, None),
    ],
)
def test_runtime_fix_follows_the_seeds_order(flags, fix) -> None:
    [p] = diagnose_runtime(_sample(2.0, 0.97, 3.0, 9.0, preempt_rate=1.0), [], flags=flags)
    assert (dict(p.fix) if p.fix else None) == fix


@pytest.mark.parametrize(
    "now",
    [
        _sample(2.0, 0.90, 7.0, 9.0, 1.0),  # KV below 95 %
        _sample(2.0, 1.0, 0.0, 9.0, 1.0),  # nothing waiting
        _sample(2.0, 1.0, 7.0, 3.0, 0.0),  # preemptions flat
        _sample(2.0, None, 7.0, 9.0, 1.0),  # KV unknown
    ],
)
def test_runtime_quiet_when_not_short(now) -> None:
    assert diagnose_runtime(now, [_sample(1.0, 1.0, 7.0, 3.0)]) == []


def test_runtime_rising_from_history_without_rate() -> None:
    history = [_sample(0.0, 1.0, 2.0, 3.0), _sample(1.0, 1.0, 2.0, 3.0)]
    assert diagnose_runtime(_sample(2.0, 0.99, 2.0, 5.0), history)


@pytest.mark.parametrize(
    ("flags", "fix"),
    [
        # vLLM sizes the cache from --kv-cache-memory-bytes alone: raise it, not the utilization
        ({"kv-cache-memory-bytes": 8 * 1024**3}, {"kv-cache-memory-bytes": 10 * 1024**3}),
        (
            {"kv-cache-memory-bytes": "4G", "gpu-memory-utilization": 0.5},
            {"kv-cache-memory-bytes": 5 * 1024**3},
        ),
        ({"kv-cache-memory-bytes": 1000, "max-model-len": 32768}, {"max-model-len": 16384}),
    ],
)
def test_runtime_fix_raises_an_explicit_kv_size(flags, fix) -> None:
    [p] = diagnose_runtime(_sample(2.0, 0.97, 3.0, 9.0, preempt_rate=1.0), [], flags=flags)
    assert dict(p.fix or {}) == fix


def _run(watch: KvShortWatch, points, flags=None) -> list[bool]:
    """Whether the watch shows "KV cache short" after each (at, kv, waiting, preemptions total)."""
    return [bool(watch.observe(_sample(at, kv, w, total), flags)) for at, kv, w, total in points]


def test_kv_watch_enters_only_after_the_pressure_lasted() -> None:
    watch = KvShortWatch(enter_s=10.0, leave_s=30.0)
    pressure = [(float(t), 0.98, 5.0, float(t)) for t in range(0, 12)]  # preempting every second
    shown = _run(watch, pressure, {"gpu-memory-utilization": 0.9})
    assert shown == [False] * 10 + [True, True]  # 10 s after the first sample of pressure
    [p] = watch.shown
    assert p.message == "KV cache 98% full, 5 waiting" and dict(p.fix or {}) == {
        "gpu-memory-utilization": 0.92
    }


def test_kv_watch_needs_preemptions_rising() -> None:
    watch = KvShortWatch(enter_s=10.0)
    assert not any(_run(watch, [(float(t), 1.0, 5.0, 3.0) for t in range(30)]))  # full, but flat counter


def test_kv_watch_relief_during_entry_starts_the_wait_over() -> None:
    watch = KvShortWatch(enter_s=10.0)
    points = [(float(t), 0.98, 5.0, float(t)) for t in range(8)]
    points += [(8.0, 0.98, 0.0, 8.0)]  # the queue empties for one scrape: relief
    points += [(float(t), 0.98, 5.0, float(t)) for t in range(9, 20)]
    shown = _run(watch, points)
    assert shown.index(True) == 19  # ten seconds after the pressure came back at t=9


def test_kv_watch_does_not_flicker_around_the_thresholds() -> None:
    """The flicker seen on a loaded server: usage hovering 93-97 %, the queue emptying for a scrape now
    and then. One diagnosis per sample went on and off; the watch stays on."""
    watch = KvShortWatch(enter_s=10.0, leave_s=30.0)
    points = [(float(t), 0.98, 5.0, float(t)) for t in range(11)]
    for t in range(11, 60):  # hovering: 93 % (between the thresholds) or 97 %, an empty queue every 7 s
        points.append((float(t), 0.93 if t % 2 else 0.97, 0.0 if t % 7 == 0 else 3.0, float(t)))
    shown = _run(watch, points)
    assert shown[10:] == [True] * (len(points) - 10)
    per_sample = [
        bool(diagnose_runtime(_sample(at, kv, w, total, preempt_rate=1.0), []))
        for at, kv, w, total in points[11:]
    ]
    assert True in per_sample and False in per_sample  # what it was before: on, off, on…


def test_kv_watch_leaves_after_lasting_relief_only() -> None:
    watch = KvShortWatch(enter_s=5.0, leave_s=30.0)
    points = [(float(t), 1.0, 5.0, float(t)) for t in range(6)]
    points += [(float(t), 0.5, 0.0, 6.0) for t in range(6, 20)]  # relief for 14 s
    points += [(20.0, 0.90, 2.0, 6.0)]  # between the thresholds with a queue: the relief breaks
    points += [(float(t), 0.5, 0.0, 6.0) for t in range(21, 52)]  # relief again, 30 s from t=21
    shown = _run(watch, points)
    assert shown[5] and all(shown[5:51]) and not shown[51]
    assert watch.shown == [] and not any(_run(watch, [(52.0, 0.99, 3.0, 6.0)]))  # over: starts afresh


def test_kv_watch_starts_over_on_a_new_run_and_ignores_old_samples() -> None:
    watch = KvShortWatch(enter_s=2.0)
    assert _run(watch, [(0.0, 1.0, 3.0, 50.0), (1.0, 1.0, 3.0, 51.0), (2.0, 1.0, 3.0, 52.0)])[-1]
    assert watch.observe(_sample(1.5, 0.1, 0.0, 52.0)) == watch.shown  # older than the last: ignored
    assert not _run(watch, [(3.0, 1.0, 3.0, 1.0)])[-1]  # the counter went down: another run
    with pytest.raises(ValueError, match="above the enter"):
        KvShortWatch(enter=0.8, leave=0.9)
