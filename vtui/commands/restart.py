"""`vtui restart [LAYOUT] NAME [--set flag=value …] [--unset flag …] [--save] [--json]`: have the session
supervisor stop one instance and start it again, with changed flags when given (on top of the flags it
runs with). The flags it runs with go into its run record, so `ps` and a later supervisor know them.
The layout file is left as it is unless `--save`: then, once the instance is READY, its flags are
written into the file, changing only those keys (comments and order kept); a result that would not
validate is refused before anything restarts."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from vtui.commands._input import Value, seconds
from vtui.commands._runs import (
    CommandError,
    ServiceError,
    ServiceUnavailable,
    base_url_of,
    connect,
    follow_feed,
    print_json,
    progress_printer,
    refuse_attached,
    row_of,
)
from vtui.core.flagspec import FlagTable, canonical_name, parse_flag_value
from vtui.core.model import SECRET_FLAGS, FlagValue, Layout

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
    parser.add_argument(
        "--timeout", type=seconds, action=Value, default=None, help="stop waiting after this many seconds"
    )
    parser.add_argument("--json", action="store_true", help="print the instance's row as a JSON object")


# Keys of the instance's own table in the layout, not `vllm serve` flags: the port and host are how vtui
# (health checks, `ps`, run records, bench) finds the instance, and argv() sets them from the layout, so a
# `--set port=…` would either be ignored or leave the layout and the running server disagreeing.
LAYOUT_KEYS = {"port": "port", "host": "host", "model": "model"}
INT_RANGE = (-(2**63), 2**63 - 1)  # vLLM's integers end up in C/torch int64 fields


def parse_sets(items: list[str], table: FlagTable | None = None) -> dict[str, FlagValue]:
    """`--set FLAG=VALUE` items typed for their flags. ValueError naming the item and what is wrong: no
    `=`, an unknown flag, a layout key (port/host/model), a secret (api-key), a value that does not fit.
    `table`: the instance's vLLM's flags (None: the bundled 0.32 schema)."""
    flags: dict[str, FlagValue] = {}
    for item in items:
        if not isinstance(item, str):  # argparse hands `--set=--` over as an empty list
            raise ValueError("--set: expected FLAG=VALUE, e.g. --set max-num-seqs=64")
        name, sep, text = item.partition("=")
        name = name.strip().removeprefix("--")
        if not sep or not name:
            raise ValueError(f"--set {item}: expected FLAG=VALUE, e.g. --set max-num-seqs=64")
        canonical = canonical_name(name, table) or name
        if canonical in LAYOUT_KEYS:
            raise ValueError(
                f"--set {item}: {canonical} is a layout key, not a flag vtui passes through; change "
                f"`{LAYOUT_KEYS[canonical]} = ...` in the instance's table of the layout file, then "
                "`vtui check` and `vtui restart NAME`"
            )
        if canonical in SECRET_FLAGS:
            raise ValueError(
                f"--set {canonical}=...: a secret on the command line is visible to every local user (ps); "
                f'set it in the layout as {canonical} = "${{VAR}}" with VAR in the environment'
            )
        try:
            value = parse_flag_value(name, text, table)
        except ValueError as exc:
            raise ValueError(f"--set {item}: {exc}") from None
        problem = _out_of_range(value)
        if problem:
            raise ValueError(f"--set {item}: {problem}")
        flags[canonical] = cast(FlagValue, value)
    return flags


def _out_of_range(value: object) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not INT_RANGE[0] <= value <= INT_RANGE[1]:
        return f"{value} is out of range (a 64-bit integer: at most {INT_RANGE[1]:,})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    return None


def parse_unsets(items: list[str], current: Mapping[str, object]) -> list[str]:
    """`--unset FLAG` names, each a flag the instance runs with now; ValueError naming the one that is not."""
    names = []
    for item in items:
        if not isinstance(item, str) or not item.strip():  # `--unset=--` arrives as an empty list
            raise ValueError("--unset: expected a flag name, e.g. --unset max-num-seqs")
        name = item.strip().removeprefix("--")
        canonical = canonical_name(name) or name
        if canonical not in current:
            have = ", ".join(sorted(current)) or "none"
            raise ValueError(f"--unset {item}: the instance has no flag {canonical} (its flags: {have})")
        names.append(canonical)
    return names


def run(args: argparse.Namespace) -> int:
    deferred = False
    try:
        set_flags = parse_sets(args.set_flags)
    except ValueError as exc:
        if "unknown flag" not in str(exc):
            print(f"vtui restart: {exc}", file=sys.stderr)
            return 2
        set_flags, deferred = {}, True  # perhaps a flag of the instance's own, newer vLLM: checked below
    try:
        session = connect(args.words, command="restart")
    except CommandError as exc:
        return exc.code
    if len(session.names) != 1:
        print("vtui restart: name exactly one instance", file=sys.stderr)
        return 2
    name = session.names[0]
    if refuse_attached(session, name, "restart", "restart"):
        return 2
    instances = session.status()["instances"]
    group = [i["name"] for i in instances if i.get("group") == name and i.get("role") == "replica"]
    if group and name not in {i["name"] for i in instances}:
        if args.save:
            print(f"vtui restart: --save takes one instance; {name} is a replica group", file=sys.stderr)
            return 2
        return _rolling(args, session, group)
    running = next(i for i in instances if i["name"] == name)
    if args.set_flags:
        # the instance's own vLLM's parser (read once per version, cached), the bundled one without it
        from vtui.telemetry.flagschema import schema_for

        spec = running["spec"]
        schema = schema_for(str(spec.get("engine") or "vllm"), spec.get("command"))
        if deferred or schema.source != "builtin":
            try:
                set_flags = parse_sets(args.set_flags, None if schema.source == "builtin" else schema.flags)
            except ValueError as exc:
                print(f"vtui restart: {exc}", file=sys.stderr)
                return 2
    try:
        unset = parse_unsets(args.unset, running["spec"].get("flags") or {})
    except ValueError as exc:
        print(f"vtui restart: {exc}", file=sys.stderr)
        return 2
    # --save writes the file named on the command line (else the one the session runs)
    named = session.layout.path if session.layout is not None else None
    layout_path = str(named) if named is not None else session.status().get("layout_path")
    if args.save:
        code = _check_save(layout_path, name, session, set_flags, unset)
        if code:
            return code
    follower = None if args.json else follow_feed(session.client, _only(name, progress_printer()))
    try:
        answer = session.client.post(
            "/restart", {"name": name, "set": set_flags, "unset": unset}, timeout=None
        )
        _merged(name, set_flags, unset, answer.get("flags") or {})
        states = session.client.post("/wait", {"names": [name], "timeout": args.timeout}, timeout=None)
        if follower is not None:  # its progress lines before the summary, and none after it
            follower.settle(states["states"])
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
    finally:
        if follower is not None:
            follower.stop()
    inst = next(i for i in status["instances"] if i["name"] == name)
    ready = states["states"].get(name) == "ready"
    code, saved = (0 if ready else 1), None
    if ready and args.save:
        code, saved = save_flags(Path(layout_path) if layout_path else None, name, inst["spec"]["flags"])
    if args.json:  # one JSON document on stdout, whatever happened (the reasons go to stderr)
        row = row_of(inst, status["supervisor_pid"])
        if args.save:
            row["saved_to"] = str(saved) if saved is not None else None
        print_json(row)
    elif ready:
        print(f"{name}: ready on {base_url_of(inst['spec'])} (pid {inst['pid']})")
        if saved is not None:
            print(f"{name}: flags saved to {saved}")
    else:
        print(
            f"{name}: {inst['state']}: {inst.get('last_error') or 'see `vtui logs ' + name + '`'}",
            file=sys.stderr,
        )
    if not ready and args.save:
        print(f"vtui restart: {name} did not reach READY; {layout_path} left as it is", file=sys.stderr)
    return code


def _merged(name: str, set_flags: dict[str, Any], unset: list[str], started: dict[str, Any]) -> None:
    """Another client's restart of `name` came at the same time: the supervisor ran one restart with
    both changes, the newest last (`supervisor.opqueue`). Say so where ours did not win."""
    lost = [k for k, v in set_flags.items() if started.get(k) not in (v, "***")]
    lost += [k for k in unset if k in started]
    if lost:
        print(
            f"vtui restart: another restart of {name} came at the same time and changed "
            f"{', '.join(sorted(lost))}: it runs with "
            + " ".join(f"--{k} {started[k]}" for k in sorted(lost) if k in started),
            file=sys.stderr,
        )


def _rolling(args: argparse.Namespace, session: Any, replicas: list[str]) -> int:
    """A replica group, one replica at a time (the router serves on the others): each restarted with the
    flags given, READY and back in its router before the next; stops at the first that is not."""
    words = list(args.words[:-1])  # the layout, when one was named
    for replica in replicas:
        code = run(argparse.Namespace(**{**vars(args), "words": [*words, replica]}))
        if code:
            print(
                f"vtui restart: {replica} did not come back; the rest of its group left as it is",
                file=sys.stderr,
            )
            return code
        if not _routed_again(session, replica):
            print(f"vtui restart: {replica} is READY but its router has not taken it back", file=sys.stderr)
            return 1
    return 0


def _routed_again(session: Any, replica: str, timeout: float = 30.0) -> bool:
    """Until the replica's router routes to it again (its workers, as the supervisor reports them); True
    at once when the group has no router running."""
    end = time.monotonic() + timeout
    while True:
        rows = session.status(refresh=True)["instances"]
        group = next((i.get("group") for i in rows if i["name"] == replica), None)
        router = next((i for i in rows if i.get("group") == group and i.get("role") == "router"), None)
        if router is None or router["state"] != "ready" or replica in (router.get("workers") or []):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.1)


def _only(name: str, show):
    return lambda event: show(event) if getattr(event, "instance", name) in (name, None) else None


def _check_save(layout_path, name, session, set_flags, unset) -> int:
    """Refuse now what could not be saved after the restart: the file must load, name the instance,
    and validate with the new flags."""
    from vtui.layouts import LayoutError, load_layout, render_layout

    try:
        layout = load_layout(layout_path, flags=_file_flags(layout_path))
        inst = next(i for i in session.status()["instances"] if i["name"] == name)
        running = {k: v for k, v in inst["spec"]["flags"].items() if v != "***"}
        spec = layout.instance(name).with_flags(running, tuple(layout.instance(name).flags))
        changed = layout.replace_instance(spec.with_flags(set_flags, unset))
        ok, table = _save_flags(changed, layout_path, notes=True)
        if not ok:
            return 2
        render_layout(changed, flags=table)
    except LayoutError as exc:
        for problem in exc.problems:
            print(f"vtui restart: {problem}", file=sys.stderr)
        return 2
    except (OSError, KeyError, TypeError) as exc:
        print(f"vtui restart: --save needs the layout file {layout_path}: {exc}", file=sys.stderr)
        return 2
    return 0


def save_flags(path: Path | None, name: str, flags: Mapping[str, object]) -> tuple[int, Path | None]:
    """Write `name`'s flags into the layout file as it is now (`telemetry.flagsave`, the one save of an
    instance's flags): (exit code, the file written or None), each reason printed."""
    from vtui.telemetry.flagsave import save_instance_flags

    outcome = save_instance_flags(path, name, flags)
    for problem in outcome.problems:
        print(f"vtui restart: {problem}", file=sys.stderr)
    return (0 if outcome.saved is not None else 1), outcome.saved


def _file_flags(path: str | Path | None) -> FlagTable | None:
    """The flags a layout file is read with: every flag its instances' vLLMs know (None: bundled)."""
    from vtui.telemetry.flagschema import layout_flags

    return layout_flags(path) if path is not None else None


def _save_flags(layout: Layout, path: object, notes: bool = False) -> tuple[bool, FlagTable | None]:
    """(ok, the flag table to save `layout` with), checked against each instance's own vLLM; not ok
    (after printing why) when a flag is one that instance's vLLM would reject. `notes`: say which
    instances were checked against a bundled schema instead (once, before the restart)."""
    from vtui.telemetry.flagschema import save_check

    check = save_check(layout)
    for problem in check.problems:
        print(f"vtui restart: {path} (not saved): {problem}", file=sys.stderr)
    if notes:
        for note in check.notes:
            print(f"vtui restart: note: {note}", file=sys.stderr)
    return not check.problems, check.flags
