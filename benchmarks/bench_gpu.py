"""GPU acceptance figures on a machine with NVIDIA GPUs: runs the `gpu` tests (which measure: NVML
attribution per instance, vtui vs nvidia-smi, time until a SIGKILLed leader's GPU memory is back, the
shared-GPU outcomes) and prints the figures they wrote to $VTUI_GPU_ARTIFACTS/gpu-figures.json.

    VTUI_GPU_ARTIFACTS=out python benchmarks/bench_gpu.py [pytest args]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def main(argv: list[str]) -> int:
    out = Path(os.environ.get("VTUI_GPU_ARTIFACTS") or tempfile.mkdtemp(prefix="vtui-gpu-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-figures.json").unlink(missing_ok=True)
    env = dict(os.environ, VTUI_GPU_ARTIFACTS=str(out))
    code = subprocess.call(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/gpu",
            "-m",
            "gpu",
            "-v",
            "-rs",
            "-p",
            "no:cacheprovider",
            *argv,
        ],
        env=env,
    )
    path = out / "gpu-figures.json"
    figures = json.loads(path.read_text()) if path.exists() else {}
    print("\n== GPU figures ==")
    smi = figures.get("nvidia_smi", {}).get("worst")
    if smi:
        print(
            f"vtui vs nvidia-smi, worst of 5 samples x GPUs: memory.used {smi['memory_used_rel']:.4%}, "
            f"memory.total {smi['memory_total_rel']:.4%}, utilization {smi['utilization_points']:.1f} points"
        )
    kill = figures.get("kill_9")
    if kill:
        print(
            f"kill -9 of the leader: orphan held {kill['held_gib']} GiB, memory back after "
            f"{kill['freed_after_s']} s, left: {kill['processes_left']}"
        )
    for section in (
        "pinning",
        "tensor_parallel",
        "shared_staggered",
        "shared_greedy_neighbour",
        "shared_at_once",
        "dashboard",
    ):
        if section in figures:
            print(f"{section}: {json.dumps(figures[section], default=str)[:600]}")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
