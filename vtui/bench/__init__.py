"""Load tests against OpenAI-compatible servers (vLLM, vtui's sim): `run_bench(config, on_progress)`,
with the server's own /metrics read beside each step, results as JSON/CSV, and baselines to compare
against. Textual-free: the TUI's bench screen drives it through the progress callback.
"""

from vtui.bench.baseline import (
    compare,
    context_differences,
    cost_per_million_output_tokens,
    load_baseline,
    make_baseline,
    save_baseline,
    weights_fingerprint,
)
from vtui.bench.engine import run_bench
from vtui.bench.results import csv_text, result_json, write_results
from vtui.bench.types import (
    BenchConfig,
    BenchProgress,
    BenchResult,
    Dist,
    RequestRecord,
    ServerStep,
    StepResult,
)

__all__ = [
    "BenchConfig",
    "BenchProgress",
    "BenchResult",
    "Dist",
    "RequestRecord",
    "ServerStep",
    "StepResult",
    "compare",
    "context_differences",
    "cost_per_million_output_tokens",
    "csv_text",
    "load_baseline",
    "make_baseline",
    "result_json",
    "run_bench",
    "save_baseline",
    "weights_fingerprint",
    "write_results",
]
