"""`vllm serve`'s command line for the sim: every real 0.32 option is accepted (the ones the sim models are
typed), `--sim-…` options are the sim's own, and an unknown flag fails exactly like vLLM (exit 2)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from vtui.core import flagspec


def human_int(text: str) -> int:
    """vLLM's human-readable integers (1k = 1000, 1K = 1024, 2M …), as an argparse type."""
    value = flagspec.human_int(str(text))
    if value is None:
        raise argparse.ArgumentTypeError(f"invalid human-readable integer: {text!r}")
    return value


def options() -> list[tuple[tuple[str, ...], str]]:
    """Every `vllm serve` 0.32 option from vtui's flag schema (generated from the real `--help=all`),
    as (names, kind): f = store-true switch, b = `--x/--no-x` pair, v = one value, + = one or more,
    ? = optional value. The sim thus accepts exactly vLLM's command line."""
    table = []
    for spec in flagspec.BUILTIN_FLAGS.values():
        names = (f"--{spec.name}", *spec.aliases)
        if spec.type == "bool":
            kind = "b" if spec.negatable else "f"
            names = (*names, f"--no-{spec.name}") if spec.negatable else names
        else:
            kind = "?" if spec.optional_value else "+" if spec.type == "list" else "v"
        table.append((names, kind))
    return table


TYPED: dict[str, tuple[Callable[[str], object], object]] = {  # dest -> (type, default)
    "port": (int, 8000),
    "tensor_parallel_size": (int, 1),
    "pipeline_parallel_size": (int, 1),
    "data_parallel_size": (int, 1),
    "gpu_memory_utilization": (float, flagspec.BUILTIN_FLAGS["gpu-memory-utilization"].default),
    "max_model_len": (human_int, None),
    "max_num_seqs": (int, None),
    "max_num_batched_tokens": (human_int, None),
    "dtype": (str, "auto"),
    "kv_cache_dtype": (str, "auto"),
    "block_size": (int, None),
    "kv_cache_memory_bytes": (human_int, None),
    "num_gpu_blocks_override": (int, None),
    "seed": (int, 0),
    "long_prefill_token_threshold": (int, 0),
    "cpu_offload_gb": (float, 0.0),
    "uvicorn_log_level": (str, "info"),
    "shutdown_timeout": (int, 0),
}
BOOL_DEFAULTS = {
    "disable_log_stats": False,
    "enforce_eager": False,
    "trust_remote_code": False,
    "disable_uvicorn_access_log": False,
}

UNKNOWN_USAGE = (
    "usage: vllm [-h] [-v]\n"
    "            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,run-batch,snapshot}\n"
    "            ..."
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"vllm serve: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vllm serve", usage="vllm serve [model_tag] [options]", add_help=True)
    parser.add_argument("model_tag", nargs="?", default=None)
    for names, kind in options():
        dest = names[0].lstrip("-").replace("-", "_")
        typ, default = TYPED.get(dest, (str, None))
        if kind == "b":
            parser.add_argument(
                *[n for n in names if not n.startswith("--no-")],
                dest=dest,
                action=argparse.BooleanOptionalAction,
                default=BOOL_DEFAULTS.get(dest),
            )
        elif kind == "f":
            parser.add_argument(*names, dest=dest, action="store_true", default=False)
        else:
            nargs = {"+": "+", "?": "?", "v": None}[kind]
            parser.add_argument(*names, dest=dest, type=typ, default=default, nargs=nargs)
    sim = parser.add_argument_group("sim", "options of vtui's simulated engine")
    sim.add_argument("--sim-gpu-memory-gib", type=float, default=80.0, help="memory of each simulated GPU")
    sim.add_argument("--sim-num-gpus", type=int, default=8, help="GPUs on the simulated box")
    sim.add_argument("--sim-startup-scale", type=float, default=1.0, help="startup time scale (0 = instant)")
    sim.add_argument("--sim-speed", type=float, default=1.0, help="speed model scale (2 = twice as fast)")
    sim.add_argument("--sim-params", default=None, help="model size when unknown, e.g. 8B")
    sim.add_argument("--sim-load", type=int, default=0, help="built-in background clients")
    sim.add_argument("--sim-engine-child", action="store_true", help="spawn a VLLM::EngineCore child process")
    sim.add_argument("--sim-metrics-version", choices=("0.32", "v0"), default="0.32")
    sim.add_argument(
        "--sim-device",
        choices=("none", "cuda"),
        default="none",
        help="cuda: also hold real CUDA memory for weights + KV (needs torch)",
    )
    sim.add_argument("--sim-stats-interval", type=float, default=10.0, help="seconds between stats lines")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        sys.stderr.write(UNKNOWN_USAGE + "\n")
        sys.stderr.write(f"vllm: error: unrecognized arguments: {' '.join(extra)}\n")
        raise SystemExit(2)
    if args.model_tag is None:
        args.model_tag = args.model or "Qwen/Qwen3-0.6B"
    args.model = args.model_tag
    return args


def non_default(args: argparse.Namespace) -> dict[str, object]:
    """vLLM's `non-default args` dict (sim options left out), in the parser's order."""
    defaults = vars(build_parser().parse_args([]))
    out: dict[str, object] = {}
    for key, value in vars(args).items():
        if key.startswith("sim_") or key == "model_tag" and value is None:
            continue
        if key == "model" or value != defaults.get(key):
            out[key] = value
    # vLLM prints model_tag first and model just before the first ModelConfig option.
    model_tag, model = out.pop("model_tag", args.model_tag), out.pop("model", args.model)
    items = list(out.items())
    at = next((i for i, (k, _) in enumerate(items) if k in _MODEL_CONFIG), len(items))
    return {"model_tag": model_tag, **dict(items[:at]), "model": model, **dict(items[at:])}


_MODEL_CONFIG = {
    "dtype",
    "max_model_len",
    "enforce_eager",
    "quantization",
    "seed",
    "served_model_name",
    "trust_remote_code",
    "revision",
    "tokenizer",
    "max_logprobs",
    "generation_config",
    "hf_overrides",
    "config_format",
    "load_format",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "enable_chunked_prefill",
}
