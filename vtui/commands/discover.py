"""`vtui discover [--add LAYOUT] [--json]`: vLLM servers running on this machine that no vtui session
launched (a process scan for `vllm serve` / vLLM API servers and `vtui sim`, each one's ports probed at
`/metrics` for `vllm:` families; see vtui.supervisor.discovery). `--add LAYOUT` appends them to that layout
file as attached servers (`engine = "external"`, `url = …`), skipping the ones it already lists: only
the new tables are written (comments and the rest of the file as they were), atomically, and only when
the result validates. Exit codes: 0 done (also when nothing is found), 1 the file could not be written,
2 bad input (no such layout file, a layout that does not validate)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

HELP = "find vLLM servers on this machine that vtui does not run (--add LAYOUT: attach them there)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--add",
        metavar="LAYOUT",
        help='append what is found to this layout file as engine = "external" instances',
    )
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds per /metrics probe (default 2)")
    parser.add_argument("--json", action="store_true", help="print what was found as JSON")


def run(args: argparse.Namespace) -> int:
    from vtui.supervisor.discovery import discover

    found = discover(timeout=args.timeout)
    if args.add:
        return _add(Path(args.add).expanduser(), found, args.json)
    if args.json:
        from vtui.commands._runs import print_json

        print_json([f.as_dict() for f in found])
        return 0
    if not found:
        print("no vLLM server found on this machine that vtui does not already run")
        return 0
    rows = [("URL", "PID", "KIND", "MODEL", "COMMAND")]
    rows += [(f.url, str(f.pid), f.kind, f.model or "-", f.command[:60]) for f in found]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row[:4], widths, strict=True)) + "  " + row[4])
    print('attach them with `vtui discover --add LAYOUT` (as engine = "external" instances)')
    return 0


def _add(path: Path, found: list, as_json: bool) -> int:
    from vtui.core.model import InstanceSpec
    from vtui.layouts import LayoutError, load_layout, save_layout
    from vtui.supervisor.discovery import name_for
    from vtui.telemetry import flagschema

    if not path.is_file():
        print(
            f"vtui discover: {path}: no such layout file (--add writes into an existing one)", file=sys.stderr
        )
        return 2
    try:
        layout = load_layout(path, flags=flagschema.layout_flags(str(path)))
    except LayoutError as exc:
        for problem in exc.problems:
            print(f"vtui discover: {problem}", file=sys.stderr)
        return 2
    listed = {spec.base_url for spec in layout.instances}
    listed |= {f"http://127.0.0.1:{s.port}" for s in layout.instances if s.engine != "external"}
    names = set(layout.names())
    added: list[InstanceSpec] = []
    for item in found:
        if item.url in listed:
            continue
        name = name_for(item, names)
        names.add(name)
        host = item.url.split("//", 1)[1].rsplit(":", 1)[0].strip("[]")
        added.append(
            InstanceSpec(
                name=name, model=item.model or "", port=item.port, host=host, engine="external", url=item.url
            )
        )
    if added:
        try:
            save_layout(replace(layout, instances=(*layout.instances, *added)))
        except LayoutError as exc:
            for problem in exc.problems:
                print(f"vtui discover: {problem}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"vtui discover: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    if as_json:
        from vtui.commands._runs import print_json

        print_json({"layout": str(path), "added": [{"name": s.name, "url": s.url} for s in added]})
    elif added:
        for spec in added:
            print(f"{spec.name}: {spec.url} added")
        print(f"{path}: {len(added)} attached server(s) added; `vtui up {path}` watches them")
    else:
        print(f"{path}: nothing to add ({len(found)} found, all listed already)")
    return 0
