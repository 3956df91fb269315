"""The tune job's restore against fake instance operations (no process, no bench): a trial that fails to
start (its fallback failing too) and a cancel still end with the original flags running; a restore that
fails once is retried; one that keeps failing runs the last flags that reached READY; an instance the
user stopped is left stopped. Sleeps are injected: nothing here waits."""

from __future__ import annotations

from vtui.tune import Measurement, Objective, build_space, start_config
from vtui.tune.job import TuneJob, plan_json
from vtui.tune.runner import InstanceStopped
from vtui.tune.search import StartFailed
from vtui.tune.space import Config

ORIGINAL = {"max-model-len": 2048, "max-num-seqs": 2, "gpu-memory-utilization": 0.9}
DEFAULTS = {
    "max-num-seqs": 2,
    "max-num-batched-tokens": 2048,
    "gpu-memory-utilization": 0.9,
    "enable-chunked-prefill": True,
    "enable-prefix-caching": True,
    "max-model-len": 2048,
}


class FakeOps:
    """An instance behind the operation queue. `bad`: max-num-seqs values that never reach READY (and
    whose fallback fails too when `revert_fails`: left FAILED, as in the bug this replaces);
    `restore_failures`: how many "tune restore" restarts fail before one works."""

    def __init__(self, bad=(), revert_fails=False, restore_failures=0) -> None:
        self.flags = dict(ORIGINAL)
        self.state = "ready"
        self.good = dict(ORIGINAL)
        self.bad = set(bad)
        self.revert_fails = revert_fails
        self.restore_failures = restore_failures
        self.log: list[tuple[str, dict]] = []
        self.starts = 0

    def running(self):
        return dict(self.flags), self.state

    def restart(self, changes, unset, label):
        new = {k: v for k, v in {**self.flags, **changes}.items() if k not in unset}
        self.log.append((label, new))
        if self.state == "stopped":
            raise InstanceStopped("stopped")
        if label == "tune restore" and self.restore_failures > 0:
            self.restore_failures -= 1
            raise StartFailed("the original flags did not reach READY; back to the flags before")
        if new.get("max-num-seqs") in self.bad:
            if self.revert_fails:
                self.flags, self.state = new, "failed"
            raise StartFailed("CUDA out of memory", [{"kind": "oom", "message": "oom", "fix": None}])
        self.flags, self.state = new, "ready"
        self.good = dict(new)

    def last_good(self):
        return dict(self.good)

    def start(self):
        self.starts += 1
        self.state = "ready"


def make_job(ops: FakeOps, on_measure=None) -> TuneJob:
    space = build_space(ORIGINAL, required_context=2048, model_max_len=2048, concurrency=8)
    start = start_config(ORIGINAL, space, DEFAULTS)
    plan = plan_json(
        original=ORIGINAL,
        start=start,
        space=space,
        defaults=DEFAULTS,
        objective=Objective(),
        bench={"concurrency": 8, "num_requests": 8},
        warmup=0,
        max_trials=6,
        workload_tokens=64,
        model={"engine": "sim", "model": "Qwen/Qwen3-0.6B", "gpu_gib": 80.0},
        options={},
        resolved={},
        layout=None,
    )
    job = TuneJob(
        ops,
        plan,
        session="s",
        instance="a",
        base_url="http://127.0.0.1:1",
        write_progress=False,
        sleep=lambda s: None,
    )
    measured: list[Config] = []

    def measure(config: Config) -> Measurement:  # the runner's restart, then a made-up bench result
        if job.cancelled:
            from vtui.tune.runner import TuneCancelled

            raise TuneCancelled("cancelled")
        job.runner.apply(config.flags)
        measured.append(config)
        if on_measure is not None:
            on_measure(job, config, measured)
        seqs = int(config.get("max-num-seqs"))
        rps = 10.0 * min(seqs, 8) + len(measured) % 2 * 0.1
        return Measurement(rps, rps * 16, 50.0, 5.0, 16, 0, kv_peak=0.2, waiting_peak=0, preemptions=0)

    job.runner.measure = measure  # type: ignore[method-assign]
    return job


def cancel_after(n: int):
    def hook(job, config, measured):
        if len(measured) >= n:
            job.cancel()

    return hook


def test_a_trial_that_fails_to_start_and_a_cancel_end_with_the_original_flags_running():
    ops = FakeOps(bad={4}, revert_fails=True)

    def hook(job, config, measured):
        if ops.log and ops.log[-1][1].get("max-num-seqs") == 4:
            return
        if any(f.get("max-num-seqs") == 4 for _, f in ops.log):
            job.cancel()  # after the failed trial (which left the instance FAILED)

    doc = make_job(ops, hook).run()
    assert any(t["infeasible"] and "failed to start" in t["infeasible"] for t in doc["trials"])
    assert doc["state"] == "aborted" and "original flags restored" in doc["message"], doc["message"]
    assert ops.flags == ORIGINAL and ops.state == "ready"
    assert ops.log[-1][0] == "tune restore"
    assert all(label in ("tune trial", "tune restore") for label, _ in ops.log)


def test_a_restore_that_fails_once_is_retried():
    ops = FakeOps(restore_failures=1)
    doc = make_job(ops, cancel_after(4)).run()
    restores = [f for label, f in ops.log if label == "tune restore"]
    assert len(restores) == 2  # failed once, then worked
    assert doc["state"] == "aborted" and "attempt 2" in doc["message"]
    assert len(doc["restore_errors"]) == 1
    assert ops.flags == ORIGINAL and ops.state == "ready"


def test_a_restore_that_keeps_failing_runs_the_last_flags_that_reached_ready():
    ops = FakeOps(restore_failures=3)
    doc = make_job(ops, cancel_after(4)).run()
    assert ops.state == "ready" and ops.flags == ops.good and ops.flags != ORIGINAL
    # 3 tries; the last good flags run already (the fallback of each try kept them): no 4th restart
    assert [label for label, _ in ops.log].count("tune restore") == 3
    assert "last flags that reached READY" in doc["message"]


def test_a_restore_that_cannot_restart_at_all_still_starts_the_instance():
    ops = FakeOps(restore_failures=99)

    def hook(job, config, measured):
        if len(measured) >= 4:
            ops.state = "failed"  # it crashed for good under the last trial
            job.cancel()

    doc = make_job(ops, hook).run()
    assert ops.starts == 1 and ops.state == "ready"
    assert "started it as it was" in doc["message"]


def test_an_instance_the_user_stopped_is_left_stopped():
    ops = FakeOps()

    def hook(job, config, measured):
        if len(measured) >= 4:
            ops.state = "stopped"

    doc = make_job(ops, hook).run()
    assert ops.state == "stopped" and ops.starts == 0
    assert doc["state"] == "aborted" and "left stopped" in doc["message"]
