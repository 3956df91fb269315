"""On a real GPU, through the session supervisor as a user drives it (`vtui up`, `vtui ps`, `vtui down` in
child processes): two sims holding real CUDA memory on GPU 0 (one in its VLLM::EngineCore child, one in the
API server itself). A `kill -9` of the supervisor leaves both holding the same memory (NVML, per process)
and serving; the next `vtui ps` starts a successor that re-adopts them (same pids, and its own GPU sample
names them); `vtui down` leaves NVML listing no process of theirs and the memory back where it was."""

from __future__ import annotations

import os
import signal
import time

import pytest
from _support.procs import alive

from vtui.service.client import ServiceClient

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(240)]

MIB = 1 << 20


def test_kill_9_of_the_supervisor_keeps_memory_and_service_and_down_gives_it_back(
    gpus, gh, figures, tmp_path
):
    entries = [
        gh.sim_entry(gpus, "a", [0], 0.3),
        gh.sim_entry(gpus, "b", [0], 0.3, child=False, model="meta-llama/Llama-3.1-8B-Instruct"),
    ]
    path, session = gh.write_layout(tmp_path, entries)
    base = gh.quiet(gpus)
    record = {
        "backend": gpus.kind,
        "baseline_used_mib": gh.mib(base.used(0)),
        "baseline_pids": sorted(base.pids()),
    }
    with gh.brought_down(path):
        t0 = time.monotonic()
        up = gh.vtui("up", str(path), "--timeout", "240")
        record["up_s"] = round(time.monotonic() - t0, 2)
        assert up.returncode == 0, gh.said(up)
        before = gh.ps_rows(path)
        assert {n: r["state"] for n, r in before.items()} == {"a": "ready", "b": "ready"}, before
        trees = gh.instance_pids(session)
        held = gpus.read()
        mine = {n: {k: v for k, v in held.processes.items() if k[1] in trees[n]} for n in ("a", "b")}
        record.update(
            with_instances_used_mib=gh.mib(held.used(0)),
            holders={n: {str(pid): gh.mib(v) for (_, pid), v in mine[n].items()} for n in mine},
            leaders={n: r["pid"] for n, r in before.items()},
        )
        figures.record("session_supervisor", **record)
        for name in ("a", "b"):
            assert mine[name], (name, held.processes, trees)
            share = sum(v or 0 for v in mine[name].values()) / held.total(0)
            assert 0.25 <= share <= 0.31, (name, share)
        assert before["a"]["pid"] not in {pid for _, pid in mine["a"]}  # a: its engine-core child holds it
        assert {pid for _, pid in mine["b"]} == {before["b"]["pid"]}  # b: the API server itself

        old = before["a"]["supervisor_pid"]
        os.kill(old, signal.SIGKILL)
        assert gh.wait_until(lambda: not alive(old), 10.0) is not None, "the supervisor outlived SIGKILL"
        time.sleep(1.0)  # whatever its death could set off has had the time to happen
        orphaned = gpus.read()
        for name in ("a", "b"):
            assert {k: orphaned.processes.get(k) for k in mine[name]} == mine[name], (
                name,
                orphaned.processes,
            )
            row = before[name]
            assert gh.healthy(row["port"]), name
            gh.complete(row["port"], row["model"])
        record["after_kill_used_mib"] = gh.mib(orphaned.used(0))

        t0 = time.monotonic()
        again = gh.ps_rows(path)  # starts a successor, which re-adopts
        record["readopt_ps_s"] = round(time.monotonic() - t0, 2)
        assert {n: (r["state"], r["pid"]) for n, r in again.items()} == {
            n: ("ready", r["pid"]) for n, r in before.items()
        }, again
        assert all(r["adopted"] for r in again.values()), again
        successors = {r["supervisor_pid"] for r in again.values()}
        assert len(successors) == 1 and old not in successors, successors
        record.update(old_supervisor_pid=old, new_supervisor_pid=successors.pop())
        adopted = gh.instance_pids(session)
        for name in ("a", "b"):
            assert {pid for _, pid in mine[name]} <= adopted[name], (name, adopted, mine[name])
        if gpus.kind == "nvml":  # the successor's own NVML sample names the adopted holders
            client = ServiceClient(session)

            def named() -> dict[int, str | None] | None:
                gpu = client.get("/status").get("gpu")
                if not gpu:
                    return None
                found = {p["pid"]: p["instance"] for p in gpu["processes"]}
                return found if all(found.get(pid) == n for n in mine for _, pid in mine[n]) else None

            assert gh.wait_until(lambda: named() is not None, 15.0, 0.5) is not None, client.get("/status")[
                "gpu"
            ]
        figures.record("session_supervisor", **record)

        t0 = time.monotonic()
        down = gh.vtui("down", str(path))
        record["down_s"] = round(time.monotonic() - t0, 2)
        assert down.returncode == 0, gh.said(down)
        every = set().union(*trees.values(), *adopted.values())
        assert not [pid for pid in every if alive(pid)], "a process of the instances outlived vtui down"

        def back() -> bool:
            now = gpus.read()
            return not (now.pids() & every) and now.used(0) <= base.used(0) + 512 * MIB

        record["memory_back_after_down_s"] = gh.wait_until(back, 15.0)
        after = gpus.read()
        record.update(
            after_down_used_mib=gh.mib(after.used(0)),
            compute_processes_after_down=sorted(after.pids()),
        )
        figures.record("session_supervisor", **record)
        assert record["memory_back_after_down_s"] is not None, (base, after)
        assert not after.pids() - base.pids(), after.processes  # no compute process that was not there before
