#!/usr/bin/env python3
"""Regenerate vtui/core/vllm_serve_flags.json from a `vllm serve --help=all` text.

Usage: python scripts/gen_flagspec.py [HELP_TXT] [--version 0.32.0] [--check]
Default input is the bundled vtui/core/data/serve_help_0_32.txt. --check exits 1 when the data file is
stale (CI and tests/layout use it), so the table never drifts from the help it claims to come from.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vtui.core import flagspec  # noqa: E402


def build(help_path: Path, version: str) -> str:
    specs = flagspec.parse_serve_help(help_path.read_text(encoding="utf-8"))
    return flagspec.specs_to_json(specs, version, help_path.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("help_txt", nargs="?", type=Path, default=flagspec.HELP_FILE)
    parser.add_argument("--version", default="0.32.0", help="the vLLM version that printed the help")
    parser.add_argument("--out", type=Path, default=flagspec.DATA_FILE)
    parser.add_argument("--check", action="store_true", help="only report whether --out is up to date")
    args = parser.parse_args(argv)
    text = build(args.help_txt, args.version)
    current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
    if args.check:
        if current != text:
            print(f"{args.out} is stale: run python scripts/gen_flagspec.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    count = len(flagspec.parse_serve_help(args.help_txt.read_text(encoding="utf-8")))
    print(f"wrote {args.out}: {count} flags")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
