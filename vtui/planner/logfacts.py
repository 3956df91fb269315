"""The KV budget and capacity vLLM itself reported in a startup log, for `vtui plan --from-log` and for
"planned vs reported" checks. Only the few lines the planner needs; the telemetry package parses the
rest of a startup.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

from vtui.planner.memory import GiB

_ARGS = re.compile(r"non-default args: (\{.*\})\s*$")
_AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_CPU_SET = re.compile(r"(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache")
_SIZE = re.compile(r"(?:GPU|CPU|XPU|TPU|HPU)?\s*KV cache size: ([\d,]+) tokens")
_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_MAXLEN = re.compile(r"Using max model len (\d+)")


@dataclass(frozen=True)
class LogFacts:
    kv_memory_bytes: int | None = None
    exact: bool = False  # False: from a figure rounded to 0.01 GiB (± ~5 MiB)
    reported_tokens: int | None = None
    reported_concurrency: float | None = None
    max_model_len: int | None = None
    args: dict | None = None


def read_log_facts(lines: Iterable[str]) -> LogFacts:
    """KV budget (exact from `--kv-cache-memory-bytes`, else the logged GiB figure) and what vLLM reported."""
    exact_bytes = rounded = tokens = conc = max_len = None
    args = None
    for line in lines:
        if (m := _ARGS.search(line)) is not None:
            try:
                args = ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                args = None
            if isinstance(args, dict) and isinstance(args.get("kv_cache_memory_bytes"), int):
                exact_bytes = args["kv_cache_memory_bytes"]
        elif (m := _AVAILABLE.search(line) or _CPU_SET.search(line)) is not None:
            rounded = float(m.group(1))
        elif (m := _CONC.search(line)) is not None:
            conc = float(m.group(2))
            if (s := _SIZE.search(line)) is not None:
                tokens = int(s.group(1).replace(",", ""))
        elif (m := _MAXLEN.search(line)) is not None:
            max_len = int(m.group(1))
    if exact_bytes is not None:
        budget, exact = exact_bytes, True
    elif rounded is not None:
        budget, exact = int(round(rounded * GiB)), False
    else:
        budget, exact = None, False
    if max_len is None and isinstance(args, dict) and isinstance(args.get("max_model_len"), int):
        max_len = args["max_model_len"]
    return LogFacts(
        kv_memory_bytes=budget,
        exact=exact,
        reported_tokens=tokens,
        reported_concurrency=conc,
        max_model_len=max_len,
        args=args if isinstance(args, dict) else None,
    )
