"""`vtui restart [LAYOUT] NAME [--set flag=value …] [--unset flag …] [--save] [--json]`: have the session
supervisor stop one instance and start it again, with changed flags when given (on top of the flags it
runs with). The flags it runs with go into its run record, so `ps` and a later supervisor know them.
The layout file is left as it is unless `--save`: then, once the instance is READY, its flags are
written into the file, changing only those keys (comments and order kept); a result that would not
validate is refused before anything restarts."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from vtui.commands._runs import (
    CommandError,
    ServiceError,
    ServiceUnavailable,
    base_url_of,
    connect,
    follow_feed,
    print_json,
    progress_printer,
    row_of,
)
from vtui.core.flagspec import parse_flag_value

HELP = "restart one instance, optionally with changed flags (--set flag=value, --unset flag)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "words",
        nargs="+",
        metavar="[LAYOUT] NAME",
        help="layout file (default: the session last used), then the instance name",
    )
    parser.add_argument(
        "--set",
        dest="set_flags",
        action="append",
        default=[],
        metavar="FLAG=VALUE",
        help="set a vllm serve flag (repeatable)",
    )
    parser.add_argument(
        "--unset", action="append", default=[], metavar="FLAG", help="remove a flag (repeatable)"
    )
    parser.add_argument(
        "--save",
        action="store_true",
        help="once READY, write the flags into the layout file (comments and order kept)",
    )
    parser.add_argument("--timeout", type=float, default=None, help="stop waiting after this many seconds")
    parser.add_argument("--json", action="store_true", help="print the instance's row as a JSON object")


def parse_sets(items: list[str]) -> dict[str, object]:
    flags: dict[str, object] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip().removeprefix("--")
        if not sep or not name:
            raise ValueError(f"--set {item}: expected FLAG=VALUE, e.g. --set max-num-seqs=64")
        flags[name] = parse_flag_value(name, text)
    return flags


def run(args: argparse.Namespace) -> int:
    try:
        set_flags = parse_sets(args.set_flags)
    except ValueError as exc:
        print(f"vtui restart: {exc}", file=sys.stderr)
        return 2
    unset = [u.strip().removeprefix("--") for u in args.unset]
    try:
        session = connect(args.words, command="restart")
    except CommandError as exc:
        return exc.code
    if len(session.names) != 1:
        print("vtui restart: name exactly one instance", file=sys.stderr)
        return 2
    name = session.names[0]
    layout_path = session.status().get("layout_path")
    if args.save:
        code = _check_save(layout_path, name, session, set_flags, unset)
        if code:
            return code
    if not args.json:
        follow_feed(session.client, _only(name, progress_printer()))
    try:
        session.client.post("/restart", {"name": name, "set": set_flags, "unset": unset}, timeout=None)
        states = session.client.post("/wait", {"names": [name], "timeout": args.timeout}, timeout=None)
        status = session.status(refresh=True)
    except KeyboardInterrupt:
        print("vtui restart: interrupted; the instance keeps starting", file=sys.stderr)
        return 130
    except ServiceError as exc:
        for problem in exc.problems:
            print(f"vtui restart: {problem}", file=sys.stderr)
        return 1
    except ServiceUnavailable as exc:
        print(f"vtui restart: {exc}", file=sys.stderr)
        return 1
    inst = next(i for i in status["instances"] if i["name"] == name)
    ready = states["states"].get(name) == "ready"
    if args.json:
        print_json(row_of(inst, status["supervisor_pid"]))
    elif ready:
        print(f"{name}: ready on {base_url_of(inst['spec'])} (pid {inst['pid']})")
    else:
        print(
            f"{name}: {inst['state']}: {inst.get('last_error') or 'see `vtui logs ' + name + '`'}",
            file=sys.stderr,
        )
    if not ready:
        if args.save:
            print(f"vtui restart: {name} did not reach READY; {layout_path} left as it is", file=sys.stderr)
        return 1
    if args.save:
        return _save(Path(layout_path) if layout_path else None, name, inst["spec"]["flags"])
    return 0


def _only(name: str, show):
    return lambda event: show(event) if getattr(event, "instance", name) in (name, None) else None


def _check_save(layout_path, name, session, set_flags, unset) -> int:
    """Refuse now what could not be saved after the restart: the file must load, name the instance,
    and validate with the new flags."""
    from vtui.layouts import LayoutError, load_layout, render_layout

    try:
        layout = load_layout(layout_path)
        inst = next(i for i in session.status()["instances"] if i["name"] == name)
        running = {k: v for k, v in inst["spec"]["flags"].items() if v != "***"}
        spec = layout.instance(name).with_flags(running, tuple(layout.instance(name).flags))
        render_layout(layout.replace_instance(spec.with_flags(set_flags, unset)))
    except LayoutError as exc:
        for problem in exc.problems:
            print(f"vtui restart: {problem}", file=sys.stderr)
        return 2
    except (OSError, KeyError, TypeError) as exc:
        print(f"vtui restart: --save needs the layout file {layout_path}: {exc}", file=sys.stderr)
        return 2
    return 0


def _save(path: Path | None, name: str, flags: Mapping[str, object]) -> int:
    """Write `name`'s flags into the layout file as it is now, not the copy read before the restart:
    edits made to the file while the instance started are kept, not undone. Secrets stay the file's."""
    from vtui.core.model import SECRET_FLAGS
    from vtui.layouts import LayoutError, load_layout, save_layout

    try:
        current = load_layout(path) if path is not None else None
        if current is None or name not in current.names():
            print(
                f"vtui restart: {name} runs, but {path} has no instance {name} any more: not saved",
                file=sys.stderr,
            )
            return 1
        own = current.instance(name)
        kept: dict[str, Any] = {k: v for k, v in own.flags.items() if k in SECRET_FLAGS}
        plain: dict[str, Any] = {k: v for k, v in flags.items() if k not in SECRET_FLAGS}
        saved = save_layout(current.replace_instance(replace(own, flags={**plain, **kept})))
    except (OSError, LayoutError) as exc:
        print(f"vtui restart: {name} runs, but {path} was not saved: {exc}", file=sys.stderr)
        return 1
    print(f"{name}: flags saved to {saved}")
    return 0
