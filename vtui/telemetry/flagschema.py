"""The one resolver of which `vllm serve` flag schema applies to an instance (`schema_for`), and so to a
layout (`layout_flags`, `load_resolved`: what every command that reads a layout loads it with):

1. the installed vLLM's own parser, read by a small script run in the instance's Python (`vllmprobe`:
   name, type, choices, default, help per option), cached per vLLM version in `paths.cache_dir()`;
2. else the bundled schema of that vLLM's release (`flagspec.bundled_flags`: 0.32, 0.33, 0.34);
3. else (a release vtui does not bundle, or no vLLM found) the newest bundled one, as a
   `flagspec.GuessedFlags`: a flag outside it is a warning, not a refusal, since the target may have it.

The simulated engine takes the bundled 0.32 schema it parses (`BUILTIN_FLAGS`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from vtui.core import paths
from vtui.core.flagspec import (
    BUILTIN_FLAGS,
    VLLM_VERSION,
    FlagSpec,
    GuessedFlags,
    bundled_flags,
    bundled_version,
    bundles,
    newest_bundled,
)
from vtui.core.model import Layout
from vtui.telemetry.vllmprobe import python_of, script_version, serve_options, vllm_version_of

__all__ = [
    "FlagSchema",
    "SaveCheck",
    "installed_schema",
    "load_resolved",
    "save_check",
    "python_of",
    "layout_schemas",
    "schema_for",
    "union_table",
    "unknown_flags",
    "vllm_version_of",
]


@dataclass(frozen=True)
class FlagSchema:
    """Flags by canonical name, with where they came from: "installed" (read now), "cache" (read
    earlier from the same vLLM version), "bundled" (vtui's table of the installed release: its parser
    unreadable), "builtin" (vtui's 0.32 table: the simulated engine's, or a server vtui does not start)
    or "newest" (the newest bundled table standing in for a vLLM vtui cannot know: `guessed`)."""

    flags: Mapping[str, FlagSpec]
    vllm_version: str | None
    source: str
    error: str | None = None  # why the installed parser could not be read (not "installed"/"cache")

    @property
    def guessed(self) -> bool:
        """The table only stands in for the target vLLM's: its unknown flags are warnings."""
        return isinstance(self.flags, GuessedFlags)

    def label(self) -> str:
        """One line for the editor and `vtui check`: which schema validates the flags."""
        if self.guessed:
            return (
                f"flags: vtui's bundled vLLM {self.vllm_version} schema, the newest it knows: {self.error}; "
                "a flag it does not know is warned about, not refused"
            )
        if self.source in ("builtin", "bundled"):
            why = f": {self.error}" if self.error else ""
            return f"flags: vtui's bundled vLLM {self.vllm_version} schema{why}"
        return f"flags: installed vLLM {self.vllm_version} ({self.source})"

    def get(self, name: str) -> FlagSpec | None:
        bare = name.lstrip("-")
        if bare in self.flags:
            return self.flags[bare]
        for spec in self.flags.values():
            if name in spec.aliases or f"-{bare}" in spec.aliases or f"--{bare}" in spec.aliases:
                return spec
        return None


def _cache_file(version: str) -> Path:
    safe = re.sub(r"[^\w.+-]", "_", version)
    # v2: read with the help texts (see vllmprobe._DUMP_SCRIPT); a v1 file held 255 empty ones for 0.32
    return paths.cache_dir() / f"flagschema-v2-vllm-{safe}.json"


def _specs(items: list[dict[str, Any]]) -> Mapping[str, FlagSpec]:
    specs: dict[str, FlagSpec] = {}
    for item in items:
        item = dict(item)
        item["aliases"] = tuple(item.get("aliases") or ())
        item["choices"] = tuple(item["choices"]) if item.get("choices") is not None else None
        known = {k: v for k, v in item.items() if k in FlagSpec.__dataclass_fields__}
        specs[known["name"]] = FlagSpec(**known)
    return MappingProxyType(specs)


def _builtin(error: str | None) -> FlagSchema:
    """The simulated engine's schema (0.32's, which it parses), also a non-vLLM server's."""
    return FlagSchema(BUILTIN_FLAGS, VLLM_VERSION, "builtin", error)


def _fallback(error: str, version: str | None = None) -> FlagSchema:
    """The schema of a vLLM instance whose own parser was not read: the bundled table of its release
    (`version`: the installed vLLM's), else the newest bundled one as a guess (a release vtui does not
    bundle, or no vLLM found: `error` says which)."""
    if version is not None and bundles(version):
        release = bundled_version(version)
        table = BUILTIN_FLAGS if release == VLLM_VERSION else bundled_flags(release)
        return FlagSchema(table, release, "bundled", f"vLLM {version} is installed; {error}")
    newest = newest_bundled()
    why = f"vLLM {version} is installed, a release vtui bundles no schema of; {error}" if version else error
    return FlagSchema(GuessedFlags(bundled_flags(newest), why), newest, "newest", why)


def installed_schema(
    executable: Sequence[str] | None = None,
    *,
    timeout: float = 300.0,
    refresh: bool = False,
    notify: Callable[[str], None] | None = None,
) -> FlagSchema:
    """The serve flags of the vLLM that `executable` (a `vllm` script or a Python command) runs.
    Blocking (the first read of a version imports vLLM: seconds); call it from a worker thread."""
    from vtui.core.atomic import atomic_write_text

    try:
        python = python_of(executable)
    except ValueError as exc:
        return _fallback(str(exc))
    try:
        version = script_version(executable, python)
    except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as exc:
        return _fallback(f"cannot run {python[0]}: {exc}")
    if version is None:
        return _fallback("vLLM is not installed for " + python[0])
    cache = _cache_file(version)
    if not refresh and cache.exists():
        try:
            data = json.loads(cache.read_text(encoding="utf-8"))
            return FlagSchema(_specs(data["flags"]), version, "cache")
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache is rebuilt below
    if notify is not None:
        notify(f"reading vLLM {version}'s serve flags from {python[0]} (once per version; cached)")
    try:
        items = serve_options(python, timeout)
    except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as exc:
        return _fallback(f"cannot read vLLM {version}'s serve parser: {exc}", version)
    if not isinstance(items, list) or not items:
        return _fallback(f"vLLM {version}'s serve parser has no options", version)
    specs = _specs(items)
    atomic_write_text(
        cache,
        json.dumps(
            {"vllm_version": version, "python": python[0], "flags": [asdict(s) for s in specs.values()]},
            indent=1,
        )
        + "\n",
    )
    return FlagSchema(specs, version, "installed")


_MEMO: dict[tuple[str, ...], tuple[float, FlagSchema]] = {}
_MEMO_SECONDS = 60.0  # a process (the UI, one `vtui check`) asks its vLLM's version at most once a minute


def schema_for(
    engine: str, command: Sequence[str] | None, notify: Callable[[str], None] | None = None
) -> FlagSchema:
    """The flag schema of an instance: its own vLLM's (`command`, else `vllm` on PATH) read once per
    version and cached on disk; the bundled one for the simulated engine or without vLLM. Blocking on
    a version's first read (seconds): call it from a worker thread in the UI."""
    if engine == "sim":
        return _builtin("the simulated engine takes the bundled schema")
    if engine != "vllm":
        return _builtin(f"a {engine} server is not started by vtui")
    if not command and shutil.which("vllm") is None:
        return _fallback("no vllm on PATH")
    key = tuple(command or ())
    hit = _MEMO.get(key)
    now = time.monotonic()
    if hit is not None and now - hit[0] < _MEMO_SECONDS:
        return hit[1]
    schema = installed_schema(command, notify=notify)
    _MEMO[key] = (now, schema)
    return schema


def known_schema(engine: str, command: Sequence[str] | None) -> FlagSchema | None:
    """The schema `schema_for` already read for this instance in this process, else None: no I/O
    (for the UI thread; the flag editor's worker reads it)."""
    if engine != "vllm":
        return schema_for(engine, command)  # no I/O for these
    hit = _MEMO.get(tuple(command or ()))
    return hit[1] if hit is not None else None


def unknown_flags(flags: Mapping[str, object], schema: FlagSchema) -> list[tuple[str, str]]:
    """(flag, reason) for each flag the schema's vLLM would reject (unknown there, or a value it does not
    take), checked with the same rules as the bundled schema; nothing for the default bundled schema
    itself (the layout loader already checked against it), nor for a flag a guessed schema does not
    know (the target may have it: the loader warned)."""
    if schema.flags is BUILTIN_FLAGS:
        return []
    from vtui.core import flagspec

    out = []
    for name, value in flags.items():
        if name in flagspec.SIM_FLAGS:
            continue
        if name not in schema.flags:
            if not schema.guessed:  # a guessed table's unknown flags are the loader's warnings
                out.append((name, f"not a flag of vLLM {schema.vllm_version}"))
            continue
        problem = flagspec.validate_flag(name, value, schema.flags)
        if problem:
            out.append((name, f"{problem} (vLLM {schema.vllm_version})"))
    return out


def layout_schemas(
    path: str | os.PathLike[str], notify: Callable[[str], None] | None = None
) -> dict[str, FlagSchema]:
    """The schema of each instance of a layout file, by instance name, from a quick read of its
    `engine` and `command` (with `[defaults]`); {} when the file does not read (the loader says why)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8").removeprefix("\ufeff"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    found = data.get("defaults")
    defaults: dict[str, object] = found if isinstance(found, dict) else {}
    out: dict[str, FlagSchema] = {}
    instances = data.get("instance")
    for i, raw in enumerate(instances if isinstance(instances, list) else []):
        if not isinstance(raw, dict):
            continue
        engine = raw.get("engine", defaults.get("engine", "vllm"))
        command = raw.get("command", defaults.get("command"))
        if not (isinstance(command, list) and command and all(isinstance(p, str) for p in command)):
            command = None
        out[str(raw.get("name", f"instance[{i}]"))] = schema_for(str(engine), command, notify)
    return out


def union_table(schemas: Iterable[FlagSchema]) -> Mapping[str, FlagSpec] | None:
    """Every flag any of the schemas knows (the bundled ones first, an installed vLLM's spec winning):
    what the layout loader accepts before each instance is checked against its own vLLM. None when
    every schema is the default bundled one; a `GuessedFlags` when one of them is a guess."""
    installed = [s for s in schemas if s.flags is not BUILTIN_FLAGS]
    if not installed:
        return None
    merged: dict[str, FlagSpec] = dict(BUILTIN_FLAGS)
    for schema in installed:
        merged.update(schema.flags)
    guesses = list(dict.fromkeys(s.error or "" for s in installed if s.guessed))
    if guesses:  # one instance's vLLM is unknown: a flag outside the union may be its
        return GuessedFlags(MappingProxyType(merged), "; ".join(guesses))
    return MappingProxyType(merged)


def layout_flags(
    path: str | os.PathLike[str], notify: Callable[[str], None] | None = None
) -> Mapping[str, FlagSpec] | None:
    """The flag table to load a layout with: every flag its instances' vLLMs know (None: the bundled
    schema). What loads a layout to start it (up, restart, the session supervisor) passes it on."""
    return union_table(layout_schemas(path, notify).values())


def load_resolved(
    path: str | os.PathLike[str], *, unset_ok: bool = False, notify: Callable[[str], None] | None = None
) -> tuple[Layout, list[str]]:
    """(layout, warnings) of a layout file loaded with the flags of the vLLMs its instances run
    (`layout_flags`): what every command that reads a layout loads it with, so a flag an instance's
    vLLM has is never refused. Raises `layouts.LayoutError` as `load_layout` does."""
    from vtui.layouts import load_layout_with_warnings

    return load_layout_with_warnings(path, unset_ok=unset_ok, flags=layout_flags(path, notify))


@dataclass(frozen=True)
class SaveCheck:
    """What saving a layout checks its flags against: `flags`, the table to load it with (every flag its
    instances' vLLMs know; None: the bundled 0.32 one); `problems`, "NAME: flags.X: why" for a flag an
    instance's own vLLM would reject; `notes`, one line per vLLM instance checked against a bundled
    schema instead of its vLLM's own (and why)."""

    flags: Mapping[str, FlagSpec] | None
    problems: tuple[str, ...]
    notes: tuple[str, ...]


def save_check(layout: Layout, notify: Callable[[str], None] | None = None) -> SaveCheck:
    """The flag check of a layout about to be saved (the flag editor's save, `restart --save`): each
    instance against the schema of the vLLM it runs (`schema_for`), as `vtui check` does. Blocking on a
    version's first read (seconds): call it from a worker thread in the UI."""
    schemas = {spec.name: schema_for(spec.engine, spec.command, notify) for spec in layout.instances}
    problems = tuple(
        f"{name}: flags.{flag}: {why}"
        for spec in layout.instances
        for flag, why in unknown_flags(spec.flags, schemas[spec.name])
        for name in (spec.name,)
    )
    notes = tuple(
        f"{spec.name}: {schemas[spec.name].label()}"
        for spec in layout.instances
        if spec.engine == "vllm" and schemas[spec.name].source in ("builtin", "bundled", "newest")
    )
    return SaveCheck(union_table(schemas.values()), problems, notes)
