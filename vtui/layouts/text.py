"""Source-text helpers for layout files: line numbers for dotted keys, and `${VAR}` expansion.

tomllib returns plain values without positions, so `LineIndex` re-reads the text to place
`instance[2].flags.max-num-seqs` on its line (good enough for `key = value` lines, dotted keys, table
headers and inline tables). `expand_vars` keeps secrets out of layout files: values name variables.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

_KEY = r'(?:[A-Za-z0-9_-]+|"[^"\n]*"|\'[^\'\n]*\')'
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_AOT_HEADER = re.compile(rf"^\[\[\s*({_DOTTED})\s*\]\]")
_HEADER = re.compile(rf"^\[\s*({_DOTTED})\s*\]")
_ASSIGN = re.compile(rf"^({_DOTTED})\s*=")
_INLINE_KEY = re.compile(rf"({_KEY})\s*=")
_PART = re.compile(_KEY)

VAR_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _parts(dotted: str) -> list[str]:
    return [p.strip("\"'") for p in _PART.findall(dotted)]


class LineIndex:
    """Maps dotted keys (`instance[0].flags.dtype`) to the 1-based line that defines them."""

    def __init__(self, text: str) -> None:
        self._lines: dict[str, int] = {}
        counts: dict[str, int] = {}
        prefix: list[str] = []
        # TOML ends lines at \n only: str.splitlines would also split inside a string at \x85, \u2028 …
        for number, line in enumerate(text.split("\n"), 1):
            stripped = line.strip()
            match = _AOT_HEADER.match(stripped)
            if match:
                parts = _parts(match.group(1))
                name = ".".join(parts)
                counts[name] = counts.get(name, -1) + 1
                prefix = [f"{name}[{counts[name]}]"]
                self._record(prefix, number)
                continue
            match = _HEADER.match(stripped)
            if match:
                parts = _parts(match.group(1))
                if parts and parts[0] in counts:  # a sub-table of the latest [[instance]]
                    parts = [f"{parts[0]}[{counts[parts[0]]}]", *parts[1:]]
                prefix = parts
                self._record(prefix, number)
                continue
            match = _ASSIGN.match(stripped)
            if match:
                key = [*prefix, *_parts(match.group(1))]
                self._record(key, number)
                rest = stripped[match.end() :].lstrip()
                if rest.startswith("{"):
                    for inner in _INLINE_KEY.finditer(rest):
                        self._record([*key, inner.group(1).strip("\"'")], number)

    def _record(self, parts: list[str], number: int) -> None:
        self._lines.setdefault(".".join(parts), number)

    def line_of(self, dotted: str) -> int | None:
        """The key's line, else its closest enclosing table's (`instance[1]` -> its header)."""
        key = dotted
        while key:
            if key in self._lines:
                return self._lines[key]
            cut = max(key.rfind("."), key.rfind("["))
            key = key[:cut] if cut > 0 else ""
        return None


def expand_vars(text: str, environ: Mapping[str, str] | None = None) -> tuple[str, list[str]]:
    """`${VAR}` and `${VAR:-default}` replaced from the environment; also returns undefined names."""
    env = os.environ if environ is None else environ
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = env.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                missing.append(name)
                return ""
            return default
        return value

    return VAR_REF.sub(replace, text), missing


def has_vars(text: object) -> bool:
    return isinstance(text, str) and VAR_REF.search(text) is not None


def var_names(text: str) -> list[str]:
    """The names of the `${VAR}` references in `text`, in order, each once."""
    return list(dict.fromkeys(m.group(1) for m in VAR_REF.finditer(text)))
