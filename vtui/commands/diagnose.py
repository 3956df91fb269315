"""`vtui diagnose LOGFILE`: paste a vLLM log, get the startup facts and what went wrong, with the flag
change that fixes it."""

from __future__ import annotations

import argparse
import json
import sys

from vtui.commands._input import read_text_input
from vtui.telemetry.diagnosis import Problem, diagnose
from vtui.telemetry.facts import memory_text
from vtui.telemetry.gpu import GpuSample, machine_source
from vtui.telemetry.startup_log import FACT_KEYS, StartupFacts, parse_startup

HELP = "read a vLLM log: startup facts, problems and the flags that fix them"

_LABELS = {
    "vllm_version": "vLLM version",
    "engine": "engine",
    "max_model_len": "max model len",
    "model_weights_gib": "model weights",
    "model_load_secs": "model load (s)",
    "total_gpu_gib": "GPU memory",
    "gpu_memory_utilization": "gpu-memory-utilization",
    "non_torch_gib": "non-torch memory",
    "activation_peak_gib": "activation peak",
    "available_kv_gib": "KV cache memory",
    "extended_kv_gib": "KV cache extended to",
    "kv_cache_tokens": "KV cache tokens",
    "num_gpu_blocks": "GPU blocks",
    "num_cpu_blocks": "CPU blocks",
    "max_concurrency": "max concurrency (x)",
    "max_concurrency_for_tokens": "  at tokens per request",
    "kv_needed_gib": "KV needed",
    "estimated_max_model_len": "estimated max model len",
    "init_engine_secs": "init engine (s)",
    "cuda_graph_capture_secs": "graph capture (s)",
    "torch_compile_secs": "torch.compile (s)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logfile", help="a vllm serve log (- for stdin)")
    parser.add_argument("--json", action="store_true", help='print {"facts": {...}, "problems": [...]}')


def _fix_text(problem: Problem) -> str:
    if not problem.fix:
        return ""
    return " ".join(f"--{k}" if v is True else f"--{k} {v}" for k, v in problem.fix.items())


def _value(facts: StartupFacts, key: str, value: object) -> str:
    """A fact as shown: memory in the unit that fits (the KV budget exact when the launch gave it in
    bytes), counts with thousands separators."""
    if key == "available_kv_gib" and facts.kv_memory_exact and facts.kv_memory_bytes is not None:
        return memory_text(facts.kv_memory_bytes / 2**30)
    if key.endswith("_gib") and isinstance(value, float | int):
        return memory_text(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def render(facts: StartupFacts, problems: list[Problem]) -> str:
    out = []
    values = facts.to_json()
    if values:
        out.append("facts:")
        out += [f"  {_LABELS.get(k, k):<28} {_value(facts, k, v)}" for k, v in values.items()]
    if facts.non_default_args:
        args = ", ".join(f"{k}={v!r}" for k, v in facts.non_default_args.items() if k != "model_tag")
        out.append(f"  {'non-default args':<28} {args}")
    if facts.phase is not None:
        out.append(f"  {'last phase':<28} {facts.phase.value}")
    if not problems:
        out.append("problems: none found")
    for problem in problems:
        out += ["", f"problem: {problem.kind}", f"  {problem.message}", f"  why: {problem.explanation}"]
        if problem.fix:
            out.append(f"  fix: {_fix_text(problem)}")
        for i, remedy in enumerate(problem.remedies, 1):
            out.append(f"  {i}. {remedy}")
    return "\n".join(out)


def _gpus_now() -> GpuSample | None:
    """This machine's GPUs right now, so a memory problem can name the processes holding them."""
    source = machine_source()
    try:
        sample = source.sample()
    finally:
        source.close()
    return sample if sample.available else None


def run(args: argparse.Namespace) -> int:
    try:
        text = read_text_input(args.logfile)
    except OSError as exc:
        print(f"vtui diagnose: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"vtui diagnose: {exc}", file=sys.stderr)
        return 2
    lines = text.splitlines()
    facts = parse_startup(lines)
    problems = diagnose(lines, facts, gpu=_gpus_now())
    if args.json:
        payload = {
            "facts": {k: v for k, v in facts.to_json().items() if k in FACT_KEYS},
            "problems": [p.to_json() for p in problems],
        }
        print(json.dumps(payload, indent=2))
    else:
        print(render(facts, problems))
    return 0
