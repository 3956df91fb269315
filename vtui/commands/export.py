"""`vtui export [LAYOUT] --to FORMAT [-o PATH] [--only NAME…]`: write what runs the layout's instances
on another engine (see vtui.export). Standard output by default: one file as is, several each after a
`# ==> NAME <==` line. `-o PATH`: one file there (or into PATH when it is a folder), several into the
folder PATH (made when missing); every file written atomically."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vtui.core.atomic import atomic_write_text
from vtui.layouts import LayoutError, NoLayoutError, resolve_layout_arg

HELP = "write the layout as vllm serve configs, docker compose, systemd units, Kubernetes or Helm values"

EXIT_INVALID = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vtui.export import FORMATS

    parser.add_argument(
        "layout", nargs="?", help="layout file or shipped name, e.g. demo (default: the session last used)"
    )
    parser.add_argument(
        "--to", required=True, choices=list(FORMATS), metavar="FORMAT", help=", ".join(FORMATS)
    )
    parser.add_argument("-o", "--output", metavar="PATH", help="write here instead of standard output")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="export only these instances")


def run(args: argparse.Namespace) -> int:
    from vtui.export import ExportError, export_layout
    from vtui.telemetry import flagschema

    try:
        path = resolve_layout_arg(args.layout)
        # nothing is started and no secret is written: an unset `${VAR}` stays a reference; the flags
        # are those of the vLLM each instance runs here (else the newest bundled: unknown ones warned)
        layout, warnings = flagschema.load_resolved(
            path, unset_ok=True, notify=lambda line: print(f"vtui export: {line}", file=sys.stderr)
        )
    except NoLayoutError as exc:
        print(f"vtui export: {exc.message}", file=sys.stderr)
        return EXIT_INVALID
    except LayoutError as exc:
        for problem in exc.problems:
            print(f"vtui export: {problem}", file=sys.stderr)
        return EXIT_INVALID
    try:
        result = export_layout(layout, args.to, args.only)
    except ExportError as exc:
        print(f"vtui export: {exc}", file=sys.stderr)
        return EXIT_INVALID
    for warning in [*warnings, *result.warnings]:
        print(f"vtui export: warning: {warning}", file=sys.stderr)
    files = result.files
    if not args.output:
        if len(files) == 1:
            sys.stdout.write(files[0].text)
        else:
            sys.stdout.write("\n".join(f"# ==> {f.name} <==\n{f.text}" for f in files))
        return 0
    target = Path(args.output)
    if len(files) == 1 and not target.is_dir():
        written = [target]
    else:
        if target.exists() and not target.is_dir():
            print(
                f"vtui export: {target}: {len(files)} files to write ({', '.join(f.name for f in files)}); "
                "-o must name a folder",
                file=sys.stderr,
            )
            return EXIT_INVALID
        written = [target / f.name for f in files]
    try:
        for file, dest in zip(files, written, strict=True):
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(dest, file.text)
    except OSError as exc:
        print(f"vtui export: cannot write {exc.filename or target}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    for dest in written:
        print(f"wrote {dest}", file=sys.stderr)
    return 0
