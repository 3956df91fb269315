"""Parsing `vllm serve --help=all` into `FlagSpec`s: what `scripts/gen_flagspec.py` builds the bundled
tables with, and what the telemetry package reads an installed vLLM's help with."""

from __future__ import annotations

import ast
import json
import re

from vtui.core.flagdef import FlagSpec, inverse_switch

_SPLIT_NAMES = re.compile(r",\s+(?=-)")
_DEFAULT = re.compile(
    r"\(default:\s*((?:(?!\(default:).)*)\)\s*$", re.S
)  # the last one: help may quote another
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
# Flags whose help says "(default: None)" and nothing else about their type.
_INT_FLAGS = frozenset(
    {
        "api-server-count",
        "block-size",
        "cp-kv-cache-interleave-size",
        "cpu-distributed-timeout-seconds",
        "data-parallel-rank",
        "data-parallel-rpc-port",
        "data-parallel-size",
        "data-parallel-size-local",
        "data-parallel-start-rank",
        "dcp-kv-cache-interleave-size",
        "decode-context-parallel-size",
        "distributed-timeout-seconds",
        "dp-supervisor-probe-failure-threshold",
        "elastic-ep-max-dp-size",
        "grpc-port",
        "h11-max-header-count",
        "h11-max-incomplete-event-size",
        "mamba-block-size",
        "mamba-cache-philox-rounds",
        "master-port",
        "max-cpu-loras",
        "max-cudagraph-capture-size",
        "max-log-len",
        "max-logprobs",
        "max-lora-cls-labels",
        "max-loras",
        "max-num-active-seqs",
        "max-num-queued-reqs",
        "max-num-seqs",
        "max-parallel-loading-workers",
        "nnodes",
        "node-rank",
        "num-gpu-blocks-override",
        "offload-group-size",
        "offload-num-in-group",
        "offload-prefetch-step",
        "pipeline-parallel-size",
        "port",
        "prefill-context-parallel-size",
        "prefill-schedule-interval",
        "prefix-match-unit",
        "renderer-num-workers",
        "replayssm-buffer-len",
        "seed",
        "spec-tokens",
        "stream-interval",
        "tensor-parallel-size",
        "ubatch-size",
        "dbo-decode-token-threshold",
        "dbo-prefill-token-threshold",
        "dp-sync-interval",
        "optimization-level",
        "shutdown-timeout",
        "long-prefill-token-threshold",
        "max-num-queued-tokens",
        "max-num-scheduled-tokens",
        "safetensors-prefetch-num-threads",
        "mm-shm-cache-max-object-size-mb",
    }
)
_FLOAT_FLAGS = frozenset(
    {
        "gpu-memory-utilization",
        "kv-offloading-size",
        "cpu-offload-gb",
        "mm-processor-cache-gb",
        "mm-ipc-gpu-memory-gb",
        "video-pruning-rate",
        "sse-keep-alive-interval",
        "watermark",
        "dp-supervisor-probe-interval-s",
        "dp-supervisor-probe-timeout-s",
        "prefix-cache-retention-interval",
        "mm-encoder-fp8-scale-save-margin",
        "swap-space",
        "kv-cache-metrics-sample",
    }
)


def _literal(text: str) -> object:
    text = text.strip()
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    if isinstance(value, (tuple, set, frozenset)):
        value = list(value)
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return text
    return value


def _choices(text: str) -> tuple[str, ...] | None:
    text = text.strip()
    if text.startswith("{") and "}" in text:
        return tuple(c for c in text[1 : text.index("}")].split(","))
    if text.startswith("['"):
        value = _literal(text[: text.index("]") + 1])
        if isinstance(value, list):
            return tuple(str(v) for v in value)
    return None


def _spec_from_block(signature: str, help_lines: list[str], group: str) -> FlagSpec | None:
    parts = _SPLIT_NAMES.split(signature.strip())
    names = [p.split(" ", 1)[0] for p in parts]
    longs = [n for n in names if n.startswith("--")]
    if not longs or "--help" in names:
        return None
    name = longs[0][2:]
    rest = parts[0].split(" ", 1)[1] if " " in parts[0] else ""
    inverse = inverse_switch(name)
    negations = {f"--no-{name}", *((f"--{inverse}",) if inverse and not rest else ())}
    negatable = any(n in negations for n in names)
    aliases = tuple(n for n in names if n != longs[0] and n not in negations)
    text = "\n".join(help_lines).strip()
    default: object = None
    match = _DEFAULT.search(text)
    if match:
        default = _literal(" ".join(match.group(1).split()))
        text = text[: match.start()].rstrip()
    open_choices = " or name registered" in rest
    choices = None if open_choices else _choices(rest)
    flat = " ".join(text.split())
    human = "human-readable integers" in flat
    optional_value = rest.startswith("[") and rest.endswith("]") and not rest.startswith("['")
    if not rest or negatable:
        kind = "bool"
    elif re.search(r"\s\[\S+ \.\.\.\]$", rest):
        kind = "list"
    elif choices is not None:
        kind = "int" if all(_NUMBER.match(c) for c in choices) else "str"
    elif "valid JSON string" in flat:
        kind = "json"
    elif human or name in _INT_FLAGS:
        kind = "int"
    elif name in _FLOAT_FLAGS:
        kind = "float"
    elif isinstance(default, bool):
        kind = "bool"
    elif isinstance(default, int):
        kind = "int"
    elif isinstance(default, float):
        kind = "float"
    elif isinstance(default, (list, dict)):
        kind = "json"
    else:
        kind = "str"
    return FlagSpec(
        name=name,
        type=kind,
        choices=choices,
        default=default,
        help=text,
        aliases=aliases,
        group=group,
        human=human,
        optional_value=optional_value,
        negatable=negatable,
    )


def parse_serve_help(text: str) -> dict[str, FlagSpec]:
    """Every option of a `vllm serve --help=all` text, by canonical name (argparse's layout)."""
    flags: dict[str, FlagSpec] = {}
    group = "options"
    signature: str | None = None
    help_lines: list[str] = []

    def flush() -> None:
        if signature is not None:
            spec = _spec_from_block(signature, help_lines, group)
            if spec is not None:
                flags[spec.name] = spec

    for line in text.splitlines():
        if line.startswith("  -"):
            flush()
            head, _, first_help = line[2:].partition("  ")
            signature, help_lines = head, ([first_help.strip()] if first_help.strip() else [])
        elif line.startswith("    ") and signature is not None:
            help_lines.append(line[24:] if line[:24].isspace() else line.strip())
        elif line and not line.startswith(" ") and line.rstrip().endswith(":"):
            flush()
            signature, group = None, line.rstrip()[:-1]
        elif line.strip() and signature is not None and not line.startswith("    "):
            flush()
            signature = None
    flush()
    return flags
