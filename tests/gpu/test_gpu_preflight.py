"""On a real GPU: the free-memory check before a launch. A process vtui did not start holds most of GPU 0
(a torch allocation of the test's own); `vtui up` of a sim asking gpu-memory-utilization 0.5 is refused
before anything is launched, naming the holder by PID with the memory NVML shows for it. Once the holder
is gone the same `vtui up` starts it: the memory was the only reason."""

from __future__ import annotations

import time

import pytest
from _support.procs import marked

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(240)]

GIB = 1 << 30
UTIL = 0.5


def test_a_start_asking_more_than_is_free_is_refused_before_launch_naming_the_holder(
    gpus, gh, figures, tmp_path
):
    path, session = gh.write_layout(tmp_path, [gh.sim_entry(gpus, "a", [0], UTIL)])
    base = gh.quiet(gpus)
    total = base.total(0)
    hold = total - base.used(0) - int(0.35 * total)  # leaves 35 % free, the sim asks 50 %
    record: dict[str, object] = {
        "backend": gpus.kind,
        "utilization": UTIL,
        "baseline_used_mib": gh.mib(base.used(0)),
    }
    with gh.brought_down(path):
        with gpus.holding(hold) as holder:
            held = gpus.read()
            assert holder.pid in held.pids(0), held.processes
            t0 = time.monotonic()
            refused = gh.vtui("up", str(path), "--timeout", "120")
            record.update(
                refused_in_s=round(time.monotonic() - t0, 2),
                holder_pid=holder.pid,
                holder_mib=gh.mib(held.held([holder.pid], 0)),
                free_mib=gh.mib(held.total(0) - held.used(0)),
                message=[line for line in refused.stderr.splitlines() if "GPU 0" in line],
            )
            figures.record("free_memory_preflight", **record)
            assert refused.returncode == 1, gh.said(refused)
            shown = f"{held.held([holder.pid], 0) / GIB:.2f} GiB"
            assert f"held by pid {holder.pid} (not a vtui instance, {shown})" in refused.stderr, gh.said(
                refused
            )
            assert f"less than gpu-memory-utilization {UTIL:g} asks" in refused.stderr, gh.said(refused)
            assert "nothing was started" in refused.stderr, gh.said(refused)
            row = gh.ps_rows(path)["a"]
            assert row["state"] == "stopped" and row["pid"] is None, row
            assert not marked(session + "/"), "a process was launched"
            assert gpus.read().pids() == held.pids(), "something new holds GPU memory"
        assert gh.wait_until(lambda: holder.pid not in gpus.read().pids(), 15.0) is not None

        t0 = time.monotonic()
        up = gh.vtui("up", str(path), "--timeout", "240")
        record["up_after_the_holder_left_s"] = round(time.monotonic() - t0, 2)
        figures.record("free_memory_preflight", **record)
        assert up.returncode == 0, gh.said(up)
        assert gh.ps_rows(path)["a"]["state"] == "ready"
