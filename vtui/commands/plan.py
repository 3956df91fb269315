"""`vtui plan`: how many tokens and concurrent requests a launch will hold, before launching it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vtui.core.flagspec import human_int_arg
from vtui.planner.core import flag_default

HELP = "plan KV-cache capacity (tokens, concurrency, longest context) before a launch"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", help="model folder, config.json, or HF id cached on disk")
    parser.add_argument("--config", dest="config_path", help="path to config.json or its folder")
    parser.add_argument(
        "--tensor-parallel-size", "-tp", type=int, default=flag_default("tensor-parallel-size")
    )
    parser.add_argument(
        "--pipeline-parallel-size", "-pp", type=int, default=flag_default("pipeline-parallel-size")
    )
    parser.add_argument("--dtype", default=flag_default("dtype"))
    parser.add_argument("--quantization", "-q", default=None)
    parser.add_argument("--kv-cache-dtype", default=flag_default("kv-cache-dtype"))
    parser.add_argument("--block-size", type=int, default=None, help="default 16 (GPU), 128 (CPU)")
    parser.add_argument("--max-model-len", type=human_int_arg, default=None)
    parser.add_argument(
        "--max-num-seqs", type=int, default=None, help="default: vLLM's (1024 on GPUs of >= 70 GiB, else 256)"
    )
    parser.add_argument("--max-num-batched-tokens", type=human_int_arg, default=None)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--kv-memory-gib", type=float, default=None, help="known KV budget per GPU (GiB)")
    budget.add_argument(
        "--kv-memory-bytes",
        "--kv-cache-memory-bytes",
        type=human_int_arg,
        default=None,
        help="known KV budget per GPU in bytes (64M, 1G: as vLLM parses them)",
    )
    budget.add_argument(
        "--from-log",
        type=Path,
        default=None,
        help="take the KV budget (and max-model-len) from a vLLM startup log",
    )
    parser.add_argument("--gpu-memory-gib", type=float, default=None, help="memory per GPU (default: NVML)")
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help=f"default: vLLM's ({flag_default('gpu-memory-utilization')})",
    )
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="cuda (default) or cpu (vLLM's CPU build: block size 128)",
    )
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--disable-hybrid-kv-cache-manager", action="store_true")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _nvml_gib() -> float | None:
    """Total memory of GPU 0 via NVML, or None without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total / 1024**3
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 — no pynvml, or pynvml.NVMLError / ctypes errors: no GPU size known
        return None


def build_params(args: argparse.Namespace):
    """PlanParams from the parsed arguments (and the log, when --from-log)."""
    from vtui.planner import PlanParams

    kv_bytes = args.kv_memory_bytes
    source = "given" if kv_bytes is not None else None
    if args.kv_memory_gib is not None:
        kv_bytes, source = int(round(args.kv_memory_gib * 1024**3)), "given"
    max_len, device = args.max_model_len, args.device
    if args.from_log is not None:
        from vtui.telemetry.startup_log import parse_startup

        text = args.from_log.read_text(errors="replace")
        facts = parse_startup(text.splitlines())
        if facts.kv_memory_bytes is None:
            raise ValueError(f"{args.from_log}: no KV cache budget in this log")
        kv_bytes = facts.kv_memory_bytes
        source = "log (exact)" if facts.kv_memory_exact else "log (rounded to 0.01 GiB)"
        max_len = max_len or facts.max_model_len

        def logged(name: str, given: object) -> object:
            value = facts.arg(name)
            return given if value is None else value

        args = argparse.Namespace(
            **{
                **vars(args),
                "dtype": logged("dtype", args.dtype) if args.dtype == "auto" else args.dtype,
                "kv_cache_dtype": logged("kv_cache_dtype", args.kv_cache_dtype),
                "block_size": args.block_size or facts.arg("block_size"),
                "tensor_parallel_size": logged("tensor_parallel_size", args.tensor_parallel_size),
            }
        )
        if device is None and "CPU KV cache" in text:
            device = "cpu"
    gpu_gib = args.gpu_memory_gib
    if kv_bytes is None and gpu_gib is None and (device or "cuda") == "cuda":
        gpu_gib = _nvml_gib()
    return PlanParams(
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        dtype=args.dtype,
        quantization=args.quantization,
        kv_cache_dtype=args.kv_cache_dtype,
        block_size=args.block_size,
        device=device or "cuda",
        gpu_memory_gib=gpu_gib,
        gpu_memory_utilization=args.gpu_memory_utilization or flag_default("gpu-memory-utilization"),
        kv_memory_bytes=kv_bytes,
        kv_budget_source=source,
        max_model_len=max_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enforce_eager=args.enforce_eager,
        hybrid_kv_cache_manager=not args.disable_hybrid_kv_cache_manager,
    )


def _fmt(value: object, suffix: str = "") -> str:
    if value is None:
        return "--"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, int):
        return f"{value:,}{suffix}"
    if isinstance(value, float):
        return f"{value:,.2f}{suffix}"
    return f"{value}{suffix}"


def _size(value: int | None) -> str:
    if value is None:
        return "--"
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {unit}"
    return f"{value} B"


def render(result) -> str:
    rows = [
        ("model", result.model),
        ("max-model-len / block size", f"{result.max_model_len:,} / {result.block_size}"),
        ("dtype / KV bytes per element", f"{result.model_dtype} / {result.kv_dtype_bytes:g}"),
        ("KV heads × layers per GPU", f"{result.kv_heads_per_gpu} × {result.layers_per_gpu}"),
        (
            "KV groups",
            ", ".join(result.kv_groups)
            + (f" (window {result.sliding_window})" if result.sliding_window else ""),
        ),
        ("KV bytes per token", _fmt(result.kv_bytes_per_token)),
        ("weights per GPU", _fmt(result.weights_gib_per_gpu, f" GiB ({result.weights_source})")),
        ("activation peak (est.)", _fmt(result.activation_gib, " GiB")),
        ("non-torch (est.)", _fmt(result.non_torch_gib, " GiB")),
        ("KV memory per GPU", f"{_size(result.available_kv_bytes)} ({result.kv_budget_source})"),
        ("KV blocks", _fmt(result.num_gpu_blocks)),
        ("KV cache tokens", _fmt(result.kv_cache_tokens)),
        ("max concurrency at max-model-len", _fmt(result.max_concurrency, "x")),
        ("max-model-len fits", _fmt(result.max_model_len_fits)),
        ("longest max-model-len that fits", _fmt(result.estimated_max_model_len)),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    if result.available_kv_bytes is None:
        lines.append("(no KV budget: give --gpu-memory-gib, --kv-memory-gib or --from-log)")
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from vtui.planner import ModelConfigError, load_model_config, plan

    target = args.config_path or args.model
    if not target:
        print(
            "vtui plan: give a model folder, config.json or cached HF id (or --config PATH)", file=sys.stderr
        )
        return 2
    try:
        config = load_model_config(target)
        params = build_params(args)
        result = plan(config, params)
    except (ModelConfigError, ValueError, OSError) as exc:
        print(f"vtui plan: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(render(result))
    return 0 if result.max_model_len_fits is not False else 1
