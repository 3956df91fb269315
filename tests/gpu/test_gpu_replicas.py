"""On two real GPUs: `replicas = 2` of a sim holding real CUDA memory, `gpus = [0, 1]` split one per
replica, vllm-router on `router_port` in front (`vtui up`): each replica (`NAME-0`, `NAME-1`, as
`InstanceSpec.replica_specs` names them) READY and pinned to its own GPU, its memory on that GPU only
(NVML per process, through the replica's process tree), and the router serving completions from both.
Skips on fewer than 2 GPUs, and while the supervisor refuses replicas (preflight's "not supported yet")."""

from __future__ import annotations

import re
import socket
import time

import httpx
import pytest
from _support.procs import alive

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(240)]

REQUESTS = 16


def _free_pair() -> int:
    """A port p with p + 1 free too (the replicas' ports)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two free ports in a row")


def _served(port: int) -> float:
    """Requests the replica finished (vllm:request_success_total, all reasons)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10, trust_env=False).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total")
    )


def test_two_replicas_one_per_gpu_behind_vllm_router(gpus, gh, figures, tmp_path):
    if gpus.count < 2:
        pytest.skip(f"needs 2 GPUs for replicas = 2, this machine has {gpus.count}")
    router_port = gh.free_port()
    entry = gh.sim_entry(gpus, "r", [0, 1], 0.3, replicas=2, router_port=router_port)
    entry["port"] = _free_pair()
    path, session = gh.write_layout(tmp_path, [entry])
    gh.quiet(gpus)
    with gh.brought_down(path):
        t0 = time.monotonic()
        up = gh.vtui("up", str(path), "--timeout", "240")
        up_s = time.monotonic() - t0
        if up.returncode != 0 and "not supported yet" in up.stderr:
            pytest.skip(f"replicas refused by preflight: {up.stderr.strip().splitlines()[0]}")
        assert up.returncode == 0, gh.said(up)
        rows = gh.ps_rows(path)
        replicas = {n: r for n, r in rows.items() if re.fullmatch(r"r-\d+", n)}
        assert sorted(replicas) == ["r-0", "r-1"], f"replica rows named NAME-i expected: {sorted(rows)}"
        assert all(r["state"] == "ready" for r in replicas.values()), replicas
        assert [replicas[f"r-{i}"]["gpus"] for i in (0, 1)] == [[0], [1]], replicas
        trees = gh.instance_pids(session)
        got = gpus.read()
        held = {n: {g: got.held(trees[n], g) for g in (0, 1)} for n in replicas}
        record = {
            "backend": gpus.kind,
            "up_s": round(up_s, 2),
            "held_mib": {n: {str(g): gh.mib(b) for g, b in per.items()} for n, per in held.items()},
            "ports": {n: r["port"] for n, r in replicas.items()},
            "router_port": router_port,
        }
        figures.record("replicas", **record)
        for i, name in enumerate(("r-0", "r-1")):
            assert held[name][i] > 0.25 * got.total(i) and held[name][1 - i] == 0, (name, held)

        before = {n: _served(r["port"]) for n, r in replicas.items()}

        def router_up() -> bool:
            try:
                return httpx.get(
                    f"http://127.0.0.1:{router_port}/health", timeout=2, trust_env=False
                ).is_success
            except httpx.HTTPError:
                return False

        assert gh.wait_until(router_up, 60.0, 0.5) is not None, "vllm-router never answered /health"
        t0 = time.monotonic()
        for k in range(REQUESTS):
            gh.complete(router_port, entry["model"], prompt=f"request {k}: {'tell me more ' * (k + 1)}")
        routed_s = time.monotonic() - t0
        served = {n: _served(r["port"]) - before[n] for n, r in replicas.items()}
        record.update(served_per_replica=served, routed_requests=REQUESTS, routed_s=round(routed_s, 2))
        figures.record("replicas", **record)
        assert sum(served.values()) == REQUESTS and all(v > 0 for v in served.values()), served

        down = gh.vtui("down", str(path))
        assert down.returncode == 0, gh.said(down)
        every = set().union(*trees.values())
        assert not [pid for pid in every if alive(pid)]
        assert not gpus.read().pids() & every
