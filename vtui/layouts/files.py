"""Layout files (TOML) -> a validated `Layout`, and back: every problem at once, with file:line and key.

`load_layout` checks the whole file before raising one `LayoutError` listing every `LayoutProblem`
(`demo.toml:14: instance[1].flags.max-num-seqs: expected an integer, got "many"`), so a user fixes a
layout in one pass. `${VAR}` references are expanded at load time (processes need real values) and
the raw references travel with the layout (`Layout.templates`), so saving writes `${VAR}` back, never a
secret that came from the environment, whatever else the process loaded. Saving is atomic.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from vtui.core.atomic import atomic_write_text, sweep_stale_temps
from vtui.core.flagspec import FlagTable
from vtui.core.model import InstanceSpec, Layout, RestartPolicy, SessionSpec
from vtui.layouts.dump import dump_layout, mapping
from vtui.layouts.errors import LayoutError, LayoutProblem, SaveRefused
from vtui.layouts.keys import (
    DEFAULT_KEYS,
    EXPORTER_KEYS,
    INSTANCE_KEYS,
    MAX_NAME,
    NOTIFY_KEYS,
    SESSION_KEYS,
    TOP_KEYS,
    WILDCARD_HOSTS,
    exporter_value,
    notify_value,
)
from vtui.layouts.rules import Checker

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "dump_layout",
    "load_layout",
    "load_layout_with_warnings",
    "referenced_vars",
    "render_layout",
    "save_layout",
    "unresolved",
]

_BOM = "\ufeff"
# Refused above this size: a layout describes a few instances (one is ~0.3 KiB). The in-place save
# (tomlkit) costs 10-30 µs per byte (benchmarks/bench_layout_size.py): 256 KiB (~1000 instances) saves in
# seconds; the 8 MB files that were accepted took minutes.
MAX_LAYOUT_BYTES = 256 * 1024


# -- loading --------------------------------------------------------------------------------------


def load_layout(
    path: str | os.PathLike[str], *, unset_ok: bool = False, flags: FlagTable | None = None
) -> Layout:
    """The validated layout at `path`; raises LayoutError listing every problem. `unset_ok`: for commands
    that start nothing (down, ps, logs), an unset `${VAR}` is kept as written, not a problem. `flags`:
    the vllm serve flags to accept (an installed vLLM's schema); None: the bundled 0.32 one."""
    return load_layout_with_warnings(path, unset_ok=unset_ok, flags=flags)[0]


def load_layout_with_warnings(
    path: str | os.PathLike[str], *, unset_ok: bool = False, flags: FlagTable | None = None
) -> tuple[Layout, list[str]]:
    """The layout plus warnings (network-exposed host, secrets written literally) as printable lines.
    `flags`: the vllm serve flags to accept (an installed vLLM's schema); None: the bundled 0.32 one."""
    file = str(path)
    source = Path(path)
    try:
        with source.open("rb") as handle:
            raw = handle.read(MAX_LAYOUT_BYTES + 1)  # a huge file is refused unread, whatever its size
        if len(raw) > MAX_LAYOUT_BYTES:
            raise LayoutError([_too_big(file)])
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise LayoutError([LayoutProblem(file, None, "", "no such layout file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LayoutError([LayoutProblem(file, None, "", f"cannot read: {exc}")]) from None
    sweep_stale_temps(source.parent, source.name)  # what a save killed before its rename left beside it
    return _load_text(text, file, source, unset_ok, flags)


def _too_big(file: str) -> LayoutProblem:
    return LayoutProblem(
        file,
        None,
        "",
        f"larger than the {MAX_LAYOUT_BYTES // 1024} KiB a layout may be (a layout describes a few "
        "instances; the in-place save of one this size would take seconds)",
    )


def _load_text(
    text: str, file: str, source: Path, unset_ok: bool = False, flags: FlagTable | None = None
) -> tuple[Layout, list[str]]:
    text = text.removeprefix(_BOM)  # a UTF-8 byte order mark (some Windows editors write one) is no key
    if len(text) > MAX_LAYOUT_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_LAYOUT_BYTES:
        raise LayoutError([_too_big(file)])
    try:
        data = tomllib.loads(text)
        checker = Checker(file, text, unset_ok=unset_ok, flags=flags)
        layout = _build(data, checker, source)
    except tomllib.TOMLDecodeError as exc:
        raise LayoutError([_syntax_problem(file, text, exc)]) from None
    except RecursionError:  # tomllib (and any walk of the values) recurses once per level
        raise LayoutError([LayoutProblem(file, _deep_line(text), "toml", _TOO_DEEP)]) from None
    problems = [LayoutProblem(file, line, key, msg) for line, key, msg in _in_file_order(checker.problems)]
    warnings = [
        str(LayoutProblem(file, line, key, msg)) for line, key, msg in _in_file_order(checker.warnings)
    ]
    if problems or layout is None:
        raise LayoutError(problems, warnings)
    return replace(layout, origin=text), warnings


_TOO_DEEP = "arrays or inline tables nested too deeply to read (a layout needs only a few levels)"


def _deep_line(text: str, limit: int = 100) -> int | None:
    """The line where brackets first open more than `limit` deep (strings not told apart: a hint)."""
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        for char in line:
            if char in "[{":
                depth += 1
                if depth > limit:
                    return number
            elif char in "]}":
                depth -= 1
    return None


def _in_file_order(items: list[tuple[int | None, str, str]]) -> list[tuple[int | None, str, str]]:
    return sorted(items, key=lambda item: (item[0] is None, item[0] or 0))


def _syntax_problem(file: str, text: str, exc: Exception) -> LayoutProblem:
    message = str(exc)
    match = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
    if match:
        line: int | None = int(match.group(1))
        message = f"{message[: match.start()]} (column {match.group(2)})"
    elif "end of document" in message:
        line = max(1, text.count("\n"))
        message = re.sub(r"\s*\(at end of document\)", " (at end of file)", message)
    else:
        line = getattr(exc, "lineno", None)
    return LayoutProblem(file, line, "toml", f"syntax error: {message}")


def _build(data: Mapping[str, object], c: Checker, source: Path) -> Layout | None:
    for key in data:
        if key not in TOP_KEYS:
            c.unknown(key, key, TOP_KEYS)
    session = _session(c, data.get("session", {}), default_name=source.stem)
    defaults = c.table_fields("defaults", data.get("defaults", {}), DEFAULT_KEYS, scope="")
    raw_instances = data.get("instance", [])
    if not isinstance(raw_instances, list):
        c.problem("instance", "expected [[instance]] tables (an array of tables)")
        raw_instances = []
    elif not raw_instances:
        c.problem("instance", "no [[instance]] in the layout")
    merged: list[dict[str, object]] = []
    for index, raw in enumerate(raw_instances):
        key = f"instance[{index}]"
        if not isinstance(raw, dict):
            c.problem(key, "expected a table")
            merged.append({})
            continue
        name = raw.get("name")
        scope = name if isinstance(name, str) else f"#{index}"
        fields = c.table_fields(key, raw, INSTANCE_KEYS, scope=scope)
        merged.append(_merge(defaults, fields))
        c.instance_shape(key, raw, merged[-1])
        external = merged[-1].get("engine") == "external"
        for required in ("name", "url") if external else ("name", "model", "port"):
            if required not in merged[-1] and required not in c.bad_keys(key) | c.bad_keys("defaults"):
                where = " (here or in [defaults])" if required == "model" else ""
                c.problem(f"{key}.{required}", f"required{where}")
    c.cross_check(merged, allow_gpu_sharing=bool(session.allow_gpu_sharing) if session else False)
    if session is not None and session.metrics_port is not None:
        _metrics_port_free(c, session.metrics_port, merged)
    if c.problems or session is None:
        return None
    instances = tuple(_spec(fields) for fields in merged)
    return Layout(session=session, instances=instances, path=source, defaults=defaults, templates=c.templates)


def _metrics_port_free(c: Checker, port: int, merged: list[dict[str, object]]) -> None:
    """The session's /metrics port must not be one an instance (or its replicas, or router) listens on."""
    for fields in merged:
        if fields.get("engine") == "external":
            continue
        first, count = fields.get("port"), fields.get("replicas", 1)
        taken = (
            set(range(first, first + count)) if isinstance(first, int) and isinstance(count, int) else set()
        )
        if isinstance(fields.get("router_port"), int):
            taken.add(fields["router_port"])  # type: ignore[arg-type]
        if port in taken:
            c.problem("session.metrics_port", f'{port} is also a port of instance "{fields.get("name")}"')


def _session(c: Checker, raw: object, default_name: str) -> SessionSpec | None:
    if not isinstance(raw, dict):
        c.problem("session", "expected a table")
        return None
    values: dict[str, object] = {"name": default_name or "vtui"}  # unnamed: the file's name
    before = len(c.problems)
    for key, value in raw.items():
        dotted = f"session.{key}"
        if key not in SESSION_KEYS:
            c.unknown(dotted, key, SESSION_KEYS)
        elif key == "name":
            if isinstance(value, str) and value.strip() and len(value) <= MAX_NAME and value.isprintable():
                values[key] = value
            else:
                c.problem(
                    dotted,
                    f"expected a non-empty name of at most {MAX_NAME} printable characters (it lands in "
                    f"file names), got {c.q(value)}",
                )
        elif key == "allow_gpu_sharing":
            if isinstance(value, bool):
                values[key] = value
            else:
                c.problem(dotted, f"expected true or false, got {c.q(value)}")
        elif key in NOTIFY_KEYS:
            values[key], error = notify_value(key, value)
            if error:
                c.problem(dotted, error)
        elif key in EXPORTER_KEYS:
            values[key], error = exporter_value(key, value)
            if error:
                c.problem(dotted, error)
                values.pop(key)
            elif key == "metrics_host" and value in WILDCARD_HOSTS:
                c.warn(dotted, f"{value}: the session's /metrics is reachable from other machines")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            values[key] = float(value)
        else:
            c.problem(dotted, f"expected a positive number, got {c.q(value)}")
    return SessionSpec(**values) if len(c.problems) == before else None  # type: ignore[arg-type]


def _merge(defaults: Mapping[str, object], own: Mapping[str, object]) -> dict[str, object]:
    merged = dict(defaults)
    for key, value in own.items():
        if key in ("env", "flags"):
            merged[key] = {**mapping(defaults.get(key)), **mapping(value)}
        else:
            merged[key] = value
    return merged


def _spec(fields: Mapping[str, object]) -> InstanceSpec:
    base = RestartPolicy()
    restart = RestartPolicy(
        mode=fields.get("restart", base.mode),  # type: ignore[arg-type]
        max_restarts=fields.get("max_restarts", base.max_restarts),  # type: ignore[arg-type]
        backoff_initial=fields.get("backoff", base.backoff_initial),  # type: ignore[arg-type]
        backoff_max=fields.get("backoff_max", base.backoff_max),  # type: ignore[arg-type]
        start_timeout=fields.get("start_timeout", base.start_timeout),  # type: ignore[arg-type]
        restart_unhealthy_after=fields.get("restart_unhealthy_after", base.restart_unhealthy_after),  # type: ignore[arg-type]
        restart_stuck_after=fields.get("restart_stuck_after", base.restart_stuck_after),  # type: ignore[arg-type]
    )
    command = fields.get("command")
    return InstanceSpec(
        name=str(fields["name"]),
        model=str(fields.get("model", "")),
        port=int(fields["port"]),  # type: ignore[call-overload]
        engine=fields.get("engine", "vllm"),  # type: ignore[arg-type]
        gpus=tuple(fields.get("gpus", ())),  # type: ignore[arg-type]
        host=str(fields.get("host", "127.0.0.1")),
        env=dict(fields.get("env", {})),  # type: ignore[call-overload]
        flags=dict(fields.get("flags", {})),  # type: ignore[call-overload]
        command=tuple(command) if command is not None else None,  # type: ignore[arg-type]
        restart=restart,
        start_stagger=float(fields.get("start_stagger", 0.0)),  # type: ignore[arg-type]
        url=fields.get("url"),  # type: ignore[arg-type]
        api_key=fields.get("api_key"),  # type: ignore[arg-type]
        replicas=int(fields.get("replicas", 1)),  # type: ignore[call-overload]
        router_port=fields.get("router_port"),  # type: ignore[arg-type]
        router_metrics_port=fields.get("router_metrics_port"),  # type: ignore[arg-type]
        replica_gpus=tuple(tuple(g) for g in fields.get("replica_gpus", ())),  # type: ignore[attr-defined]
        sleep_mode=bool(fields.get("sleep_mode", False)),
        idle_sleep_after=float(fields.get("idle_sleep_after", 0.0)),  # type: ignore[arg-type]
        force_start=bool(fields.get("force_start", False)),
        backend=str(fields.get("backend", "cuda")),
    )


# -- writing ---------------------------------------------------------------------------------------


def save_layout(
    layout: Layout, path: str | os.PathLike[str] | None = None, *, flags: FlagTable | None = None
) -> Path:
    """Write the layout atomically (temp file in the same folder, fsync, os.replace); returns the path.
    Saved to the file it was read from, only what changed is rewritten (comments and order kept), and
    what changed in the file since it was read is kept (see `render_layout`). Raises LayoutError, writing
    nothing, when the result would not load. When the file cannot be edited in place it is left as it is:
    the whole layout goes to `PATH.new` and SaveRefused says so (nothing the user wrote is lost, in the
    file or in vtui). `flags`: the vllm serve flags to check against (`telemetry.flagschema.save_check`:
    the instances' own vLLMs'); None: the bundled 0.32 one."""
    target = Path(path) if path is not None else layout.path
    if target is None:
        raise ValueError("save_layout: the layout has no path; pass one")
    try:
        text = render_layout(layout, target, flags=flags)
    except SaveRefused as exc:
        aside = target.with_name(target.name + ".new")
        try:
            rewrite = dump_layout(layout)
            _load_text(rewrite, f"{aside} (not saved)", target, flags=flags)
            atomic_write_text(aside, rewrite)
        except (OSError, LayoutError):
            raise exc from None
        raise SaveRefused(target, exc.reason, aside) from None
    atomic_write_text(target, text)
    return target


def render_layout(
    layout: Layout, path: str | os.PathLike[str] | None = None, *, flags: FlagTable | None = None
) -> str:
    """The text `save_layout` writes to `path` (default: the layout's own file). Into the existing file
    the layout was read from: that file's text with just the differences applied (comments, key order,
    untouched `${VAR}` strings kept), merged with what changed in the file since it was read
    (`vtui.layouts.merge`); SaveRefused names the file and the reason when that cannot be done. Into
    another file (a new one, save-as elsewhere): the full rewrite of `dump_layout`. The result is checked
    like a load; LayoutError (file named "PATH (not saved)") when it would not load."""
    target = Path(path) if path is not None else layout.path
    if target is None:
        raise ValueError("render_layout: the layout has no path; pass one")
    text = _edited_in_place(layout, target, flags) if _same_file(layout.path, target) else dump_layout(layout)
    _load_text(text, f"{target} (not saved)", target, flags=flags)  # raises LayoutError
    return text


def _same_file(a: Path | None, b: Path) -> bool:
    try:
        return a is not None and b.exists() and a.resolve() == b.resolve()
    except OSError:
        return False


def _edited_in_place(layout: Layout, target: Path, flags: FlagTable | None = None) -> str:
    from vtui.layouts.edit import InPlaceError, edit_text  # tomlkit: only when saving in place
    from vtui.layouts.merge import merge

    try:
        original = target.read_bytes().decode("utf-8")  # as is: CRLF line ends stay CRLF
    except (OSError, UnicodeDecodeError) as exc:
        raise SaveRefused(target, f"cannot read it to edit it in place: {exc}") from None
    try:
        disk = _load_text(original, str(target), target, flags=flags)[0]
    except LayoutError as exc:
        first = exc.problems[0] if exc.problems else "it does not load"
        raise SaveRefused(target, f"it changed on disk and no longer loads ({first})") from None
    bom = _BOM if original.startswith(_BOM) else ""
    base = disk
    if layout.origin is not None and layout.origin != original[len(bom) :]:
        try:
            base = _load_text(layout.origin, str(target), target, flags=flags)[0]
        except LayoutError:
            base = disk  # what vtui read no longer loads (a newer schema): the file as it is now
    merged = merge(base, disk, layout)
    if merged.conflicts:
        raise SaveRefused(
            target,
            "it changed on disk since vtui read it, and vtui changed the same values: "
            + _listed(merged.conflicts),
        )
    try:
        text = edit_text(original[len(bom) :], base, layout)
    except InPlaceError as exc:
        raise SaveRefused(target, f"cannot edit it in place: {exc}") from None
    except Exception as exc:  # noqa: BLE001 — the editor failed (a tomlkit change?): refuse, saying why
        raise SaveRefused(target, f"the in-place editor failed: {type(exc).__name__}: {exc}") from None
    text = bom + text
    saved = _load_text(text, f"{target} (not saved)", target, flags=flags)[0]  # raises LayoutError
    want = merged.layout
    if (saved.session, saved.instances) != (want.session, want.instances):
        from vtui.layouts.merge import changed_keys

        wrong = changed_keys(saved, want)
        why = "the edit in place would not give the layout being saved"
        if merged.on_disk:
            why = f"it changed on disk since vtui read it ({_listed(merged.on_disk)}) and the changes could not be merged"
        raise SaveRefused(target, f"{why} ({_listed(wrong)} would differ)")
    return text


def _listed(keys: tuple[str, ...], most: int = 5) -> str:
    shown = ", ".join(keys[:most])
    return shown + (f" and {len(keys) - most} more" if len(keys) > most else "")


def referenced_vars(layout: Layout) -> list[str]:
    """Every environment variable the layout's `${VAR}` references name (what a supervisor started
    elsewhere needs from the environment of the command that runs the layout)."""
    from vtui.layouts.text import var_names

    return list(dict.fromkeys(n for _, raw in layout.templates.values() for n in var_names(raw)))


def unresolved(layout: Layout) -> dict[str, list[str]]:
    """Instance name -> the `${VAR}`s left as written (loaded with `unset_ok`): such an instance can be
    listed and stopped, never started. A reference in [defaults] counts for every instance."""
    from vtui.layouts.text import has_vars, var_names

    out: dict[str, list[str]] = {}
    for (scope, _), (value, raw) in layout.templates.items():
        if value != raw or not has_vars(raw):
            continue
        for name in [scope] if scope else layout.names():
            out.setdefault(name, [])
            out[name] += [v for v in var_names(raw) if v not in out[name]]
    return out
