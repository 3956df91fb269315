"""A fake vLLM install for the flag-schema tests: a real argparse parser in a package named `vllm` (vtui's
dump script runs unchanged against it), with flags vLLM 0.32 lacks and without some it has."""

from __future__ import annotations

import sys
from pathlib import Path

FAKE_PARSER = """
import argparse
def make_arg_parser(parser):
    group = parser.add_argument_group("SchedulerConfig")
    group.add_argument("--max-num-seqs", type=int, default=None, help="Maximum number of sequences.")
    group.add_argument("--tensor-parallel-size", "-tp", type=int, default=1, help="TP size.")
    group.add_argument("--performance-mode", choices=["balanced", "throughput", "latency"],
                       default="balanced", help="A flag vLLM 0.32 does not have.")
    group.add_argument("--fancy-new-flag", type=int, default=3, help="Nor this one.")
    return parser
"""


def make_fake_vllm(root: Path, version: str = "0.99.0") -> Path:
    """root/bin/{python,vllm} and root/site/vllm/...: a vLLM install as far as vtui can tell."""
    site = root / "site"
    (site / "vllm" / "entrypoints" / "launchers").mkdir(parents=True)
    (site / "vllm" / "utils").mkdir(parents=True)
    for package in ("vllm", "vllm/entrypoints", "vllm/entrypoints/launchers", "vllm/utils"):
        (site / package / "__init__.py").write_text("")
    (site / "vllm" / "_version.py").write_text(f'__version__ = version = "{version}"\n')
    (site / "vllm" / "entrypoints" / "launchers" / "cli_args.py").write_text(FAKE_PARSER)
    (site / "vllm" / "utils" / "argparse_utils.py").write_text(
        "import argparse\nFlexibleArgumentParser = argparse.ArgumentParser\n"
    )
    bin_dir = root / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    vllm = bin_dir / "vllm"
    vllm.write_text(f"#!{python}\nraise SystemExit('the fake vLLM serves nothing')\n")
    vllm.chmod(0o755)
    return vllm
