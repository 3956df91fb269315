"""A small block-style YAML writer for what vtui exports (mappings, lists, strings, numbers, booleans).

Every string is written double-quoted with JSON escapes, which YAML 1.1 and 1.2 read back as the same
string (no `yes`/`no`/`1e3` surprises); keys are quoted unless plainly safe. vtui needs no YAML reader
at run time, so this keeps PyYAML out of its dependencies; the tests read every export with PyYAML.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence

__all__ = ["dump_documents", "dump_yaml"]

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _key(key: object) -> str:
    text = str(key)
    return text if _PLAIN_KEY.match(text) and text.lower() not in _YAML_WORDS else json.dumps(text)


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


def _lines(value: object, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            return [pad + "{}"]
        out: list[str] = []
        for key, item in value.items():
            if _is_block(item):
                out.append(f"{pad}{_key(key)}:")
                out += _lines(item, indent + (0 if isinstance(item, Sequence) else 2))
            else:
                out.append(f"{pad}{_key(key)}: {_inline(item)}")
        return out
    if isinstance(value, Sequence) and not isinstance(value, str):
        if not value:
            return [pad + "[]"]
        out = []
        for item in value:
            if _is_block(item):
                inner = _lines(item, indent + 2)
                out.append(f"{pad}- {inner[0].lstrip()}")
                out += inner[1:]
            else:
                out.append(f"{pad}- {_inline(item)}")
        return out
    return [pad + _scalar(value)]


def _is_block(value: object) -> bool:
    if isinstance(value, Mapping):
        return bool(value)
    return isinstance(value, Sequence) and not isinstance(value, str) and bool(value)


def _inline(value: object) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return "[]"
    return _scalar(value)


def dump_yaml(value: Mapping[str, object], comments: Sequence[str] = ()) -> str:
    """One YAML document, after `comments` (one `# ` line each)."""
    head = [f"# {line}".rstrip() for line in comments]
    return "\n".join([*head, *_lines(value, 0)]) + "\n"


def dump_documents(documents: Sequence[Mapping[str, object]], comments: Sequence[str] = ()) -> str:
    """Several YAML documents in one stream, `---` between them."""
    head = "".join(f"# {line}".rstrip() + "\n" for line in comments)
    return head + "---\n".join(dump_yaml(doc) for doc in documents)
