"""Planned-from-scratch vs the engine: the planner's KV cache tokens for the demo layout's instances (and
each demo model at its TP size with every other flag left to vLLM's default), beside what vtui's
simulated vLLM logs when started with the same flags on the same (simulated) 80 GiB GPUs.

"From scratch" is the flag editor's path before a launch: the model's shape (the sim's built-in table:
no config.json on disk), the instance's flags, the GPU memory per GPU, nothing read from a log. Each sim
is started for real (`python -m vtui.sim … --sim-startup-scale 0`, one at a time, on a private
simulated-GPU registry) and its log read by telemetry.startup_log.

    python benchmarks/bench_planner_vs_sim.py [--layout demo|FILE.toml] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _smoke

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _flag_args(flags: dict[str, object]) -> list[str]:
    out: list[str] = []
    for name, value in flags.items():
        if name == "sim-load":
            continue
        if value is True:
            out.append(f"--{name}")
        elif value is False:
            out.append(f"--no-{name}")
        elif isinstance(value, list):
            out += [f"--{name}", *map(str, value)]
        else:
            out += [f"--{name}", str(value)]
    return out


def sim_tokens(model: str, flags: dict[str, object], gpu_gib: float, env: dict[str, str]) -> dict:
    """Start the sim with these flags, wait for its KV cache lines, stop it; the facts its log gave."""
    from vtui.telemetry.startup_log import parse_startup

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "sim.log"
        argv = [sys.executable, "-m", "vtui.sim", model, "--host", "127.0.0.1", "--port", str(_free_port())]
        argv += ["--sim-startup-scale", "0", "--sim-gpu-memory-gib", str(gpu_gib), *_flag_args(flags)]
        with log.open("w") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        try:
            deadline = time.monotonic() + 60
            while True:
                facts = parse_startup(log.read_text(errors="replace").splitlines())
                if facts.max_concurrency is not None or proc.poll() is not None:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{model}: no KV cache line in 60 s\n{log.read_text()[-2000:]}")
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
                proc.wait(10)
        if facts.kv_cache_tokens is None:
            raise RuntimeError(f"{model}: the sim did not report a KV cache\n{log.read_text()[-2000:]}")
        return {"tokens": facts.kv_cache_tokens, "kv_gib": facts.available_kv_gib}


def planned(engine: str, model: str, flags: dict[str, object], gpu_gib: float) -> dict:
    from vtui.ui import planning

    config, why = planning.load_config((engine, model, None))
    if config is None:
        raise RuntimeError(f"{model}: {why}")
    result, why = planning.try_plan(config, planning.plan_params(flags, gpu_gib, device="cuda"))
    if result is None:
        raise RuntimeError(f"{model}: {why}")
    return {"tokens": result.kv_cache_tokens, "kv_gib": result.available_kv_gib}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layout", default="demo", help="a layout file or a shipped layout's name")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    state = tempfile.mkdtemp(prefix="vtui-bench-planner-")
    os.environ["VTUI_STATE_DIR"] = state  # loading the layout must not change the user's last session
    env = {**os.environ, "VTUI_SIM_GPU_DIR": str(Path(state) / "sim-gpus"), "PYTHONPATH": str(ROOT)}
    from vtui.layouts.files import load_layout
    from vtui.layouts.lookup import resolve_layout_arg

    layout = load_layout(resolve_layout_arg(args.layout))
    gpu_gib = float(layout.session.gpu_memory_gib or 80.0)
    cases: list[tuple[str, str, str, dict[str, object]]] = []
    for spec in layout.instances[:1] if _smoke.on() else layout.instances:
        flags = dict(spec.flags)
        cases.append((spec.name, spec.engine, spec.model, flags))
        tp = flags.get("tensor-parallel-size")
        defaults = {"tensor-parallel-size": tp} if tp else {}
        cases.append((f"{spec.model} tp{tp or 1} defaults", spec.engine, spec.model, defaults))
    rows = []
    for label, engine, model, flags in cases:
        sim = sim_tokens(model, flags, gpu_gib, env)
        plan = planned(engine, model, flags, gpu_gib)
        error = (plan["tokens"] - sim["tokens"]) / sim["tokens"]
        rows.append({"case": label, "sim": sim, "planned": plan, "error": error})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(
            f"{'case':<44}{'sim tokens':>12}{'planned':>12}{'error':>9}{'sim KV GiB':>12}{'plan KV GiB':>12}"
        )
        for r in rows:
            print(
                f"{r['case']:<44}{r['sim']['tokens']:>12,}{r['planned']['tokens']:>12,}{r['error']:>+9.2%}"
                f"{r['sim']['kv_gib']:>12.2f}{r['planned']['kv_gib']:>12.2f}"
            )
        worst = max(abs(r["error"]) for r in rows)
        print(f"worst |error|: {worst:.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
