"""The benchmarks' smoke mode (benchmarks/README.md): with VTUI_BENCH_SMOKE=1 in the environment, a script
runs its default code path on its tiniest input, in a few seconds, on vtui's sim only (no real vLLM, no
GPU, nothing beyond 127.0.0.1). Its figures mean nothing then: the run only shows that the script still
works. tests/test_benchmarks_smoke.py runs every script this way.

A helper module, not a benchmark (its name starts with `_`). The scripts import it as `_smoke`: Python puts
a script's own folder first on sys.path."""

from __future__ import annotations

import argparse
import os

ENV = "VTUI_BENCH_SMOKE"


def on() -> bool:
    """Whether this run is a smoke run."""
    return os.environ.get(ENV) == "1"


def tiny(parser: argparse.ArgumentParser, **defaults: object) -> None:
    """In a smoke run, these argument defaults instead of the parser's own (arguments given still win)."""
    if on():
        parser.set_defaults(**defaults)


def skip(reason: str) -> int:
    """What a smoke run prints when a path needs what it may not use (real vLLM, a GPU); returns 0."""
    print(f"smoke: skipped: {reason}", flush=True)
    return 0
