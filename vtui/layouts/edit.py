"""Saving a layout into the file it was read from by changing only what differs, so the user's comments,
key order, formatting and untouched `${VAR}` strings survive (a tomlkit round trip of the original text).

`edit_text` compares the file's own `Layout` with the one to save, value by effective value: a key is
written only where the saved value differs from what the file already gives that instance (its own key,
else `[defaults]`, else the built-in default). Added instances are appended as the full rewrite would
write them. It answers None when the change cannot be made in place (instances reordered, instances
written as an inline array): the caller then refuses the save and says why. `vtui.layouts` validates the
result either way before anything reaches the disk.

Only tomlkit's public API is used (its private inserts went away in 0.15). Values that exist are changed
and deleted by tomlkit in place. New keys and tables are placed by `_Placer`: tomlkit's public `t[k] = v`
puts a new key at the very end of the table's text, after the comments and blank lines that lead into
the next table, and its blank lines around it differ between releases; so each new key is added under a
unique placeholder name, the text is rendered with and without the placeholders, and each placeholder's
lines move into the text without them, right after the table's last key/value line (else under its
header), renamed. New [session] and [defaults] tables go near the top of the file, where a full rewrite
puts them.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any

import tomlkit
from tomlkit.items import AoT, Comment, Table, Whitespace

from vtui.core.model import KeyPath, Layout
from vtui.layouts.dump import (
    BUILTIN_DEFAULTS,
    Restorer,
    emit_table,
    instance_table,
    instance_values,
    mapping,
    plain,
    shared_defaults,
)
from vtui.layouts.keys import INSTANCE_KEYS

__all__ = ["InPlaceError", "edit_text"]

_MISSING = object()
_SESSION_KEYS = (
    "name",
    "allow_gpu_sharing",
    "gpu_hour_price",
    "gpu_memory_gib",
    "metrics_port",
    "metrics_host",
)
_PLACEHOLDER = "vtui-placed-{}"
_PLACEHOLDER_RE = re.compile(r"vtui-placed-(\d+)(?![\w-])")


class InPlaceError(Exception):
    """The change cannot be made by editing the file's text (the message says why)."""


def edit_text(text: str, old: Layout, new: Layout) -> str:
    """`text` changed where `new` differs from `old` (the layout as vtui read it: `text` itself, or an
    earlier version of it, whose later changes are kept). Raises InPlaceError when not possible."""
    crlf = "\r\n" in text and "\n" not in text.replace("\r\n", "")
    if crlf:
        text = text.replace("\r\n", "\n")  # placed lines are joined with "\n"; the file's own come back
    if _PLACEHOLDER_RE.search(text):
        raise InPlaceError("it holds a key named like vtui's placeholders (vtui-placed-N)")
    restore = Restorer(new.templates)
    defaults = {k: plain(v) for k, v in shared_defaults(new).items()}
    effective = {**BUILTIN_DEFAULTS, **defaults}
    doc = tomlkit.parse(text)
    aot = doc.get("instance")
    if not isinstance(aot, AoT):
        raise InPlaceError("its instances are not [[instance]] tables (an inline array?)")
    olds = {spec.name: spec for spec in old.instances}
    news = {spec.name: spec for spec in new.instances}  # by name: a big layout is no quadratic walk
    on_disk = {str(table.get("name", "")) for table in aot}
    kept = [n for n in olds if n in news]
    added = [n for n in news if n not in olds and n not in on_disk]  # (added by hand too: merge's word)
    if kept + added != [n for n in news if n in olds or n not in on_disk]:
        raise InPlaceError("the instances were reordered")
    placer = _Placer()
    _session(doc, old, new, placer)
    _defaults(doc, old.defaults, defaults, restore, placer)
    same_defaults = {k: plain(v) for k, v in old.defaults.items()} == defaults
    for index in reversed(range(len(aot))):
        name = str(aot[index].get("name", ""))
        if name in olds and name not in news:  # one added to the file by hand stays
            _drop(aot, index)
    for table in aot:
        name = str(table.get("name", ""))
        if name not in olds or name not in news:
            continue  # added to the file by hand since vtui read it: kept as it is
        before, after = olds[name], news[name]
        if before == after and same_defaults:
            continue  # the same instance under the same [defaults]: nothing to write
        _instance(
            table,
            instance_values(before),
            instance_values(after),
            effective,
            _scoped(restore, name),
            placer,
        )
    out = placer.place(doc)
    for name in added:
        block = emit_table("instance", instance_table(news[name], effective, restore), array=True)
        out = out.rstrip("\n") + "\n\n" + "\n".join(block) + "\n"
    return out.replace("\n", "\r\n") if crlf else out


def _scoped(restore: Restorer, name: str) -> Callable[[KeyPath, object], object]:
    """`restore` for one instance's keys."""
    return lambda path, value: restore(name, path, value)


class _Placer:
    """New keys and tables, held back until the in-place changes are rendered, then placed where a
    person would put them (see the module's docstring)."""

    def __init__(self) -> None:
        self._keys: list[tuple[Any, str, object]] = []  # (existing table, key, value)
        self._tables: dict[tuple[int, str], tuple[Any, str, dict[str, object]]] = {}  # new sub-tables
        self._top: dict[str, dict[str, object]] = {}  # new [session] / [defaults]: name -> keys

    def key(self, table: Any, key: str, value: object) -> None:
        self._keys.append((table, key, value))

    def table(self, parent: Any, key: str) -> dict[str, object]:
        """The keys of a new `[parent.key]` table (the same dict on every call)."""
        return self._tables.setdefault((id(parent), key), (parent, key, {}))[2]

    def top(self, name: str) -> dict[str, object]:
        """The keys of a new top-level table ([session], [defaults])."""
        return self._top.setdefault(name, {})

    def place(self, doc: Any) -> str:
        """`doc` rendered with every new key and table in its place."""
        without = tomlkit.dumps(doc)
        names: dict[str, str] = {}
        for table, key, value in self._keys:
            names[placeholder := _PLACEHOLDER.format(len(names))] = key
            table[placeholder] = value
        for parent, key, keys in self._tables.values():
            if keys:
                names[placeholder := _PLACEHOLDER.format(len(names))] = key
                new = tomlkit.table()
                for name, value in keys.items():
                    new[name] = value
                parent[placeholder] = new
        lines = without.split("\n")
        if names:
            lines = _moved(lines, tomlkit.dumps(doc).split("\n"), names)
        for name in ("session", "defaults"):
            if self._top.get(name):
                lines = _at_top(lines, emit_table(name, self._top[name]), after_session=name == "defaults")
        return "\n".join(lines)


def _moved(without: list[str], marked: list[str], names: Mapping[str, str]) -> list[str]:
    """`without` with the placeholder lines of `marked` (the same text with the new keys added under
    placeholder names) inserted after the last key/value line before where tomlkit put them, renamed."""
    runs: list[tuple[int, list[str]]] = []
    matcher = difflib.SequenceMatcher(None, without, marked, autojunk=False)
    for op, i1, _i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        if op != "insert" or not any(_PLACEHOLDER_RE.search(line) for line in marked[j1:j2]):
            if op == "insert" and all(not line.strip() for line in marked[j1:j2]):
                continue  # a blank line tomlkit added around a new key: the file keeps its own
            raise InPlaceError(f"adding keys would change other lines ({op} at line {i1 + 1})")
        runs.append((i1, [line for line in marked[j1:j2] if line.strip()]))
    out = list(without)
    for at, run in reversed(runs):  # from the end: earlier indexes stay true
        at = _after_last_value(out, at)
        block: list[str] = []
        for line in run:
            line = _PLACEHOLDER_RE.sub(lambda m: tomlkit.key(names[m.group(0)]).as_string(), line)
            if line.lstrip().startswith("[") and (block or (at > 0 and out[at - 1].strip())):
                block.append("")  # a new sub-table stands apart, as the full rewrite writes it
            block.append(line)
        if block and block[0] == "" and (at == 0 or not out[at - 1].strip()):
            block = block[1:]
        ends_table = any(line.lstrip().startswith("[") for line in block)
        if ends_table and at < len(out) and out[at].strip() and not out[at].lstrip().startswith("#"):
            block.append("")  # what follows is the next table's header
        out[at:at] = block
    return out


def _comment_only(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("#") and '"""' not in stripped and "'''" not in stripped


def _after_last_value(lines: list[str], at: int) -> int:
    """`at` moved up over the comment and blank lines before it (those lead into the next table)."""
    while at > 0 and (not lines[at - 1].strip() or _comment_only(lines[at - 1])):
        at -= 1
    return at


def _at_top(lines: list[str], block: list[str], *, after_session: bool) -> list[str]:
    """A new top-level table before the first table of the file (after [session] for [defaults]),
    above that table's own comment lines but below the comments that open the file."""
    headers = [i for i, line in enumerate(lines) if line.strip() and not _comment_only(line)]
    at = headers[0] if headers else len(lines)
    if after_session and headers and lines[at].strip().replace(" ", "").startswith("[session]"):
        at = next((i for i in headers[1:] if lines[i].lstrip().startswith("[")), len(lines))
    above = at
    while above > 0 and _comment_only(lines[above - 1]):
        above -= 1
    if above > 0:
        at = above
    while at > 0 and not lines[at - 1].strip() and at < len(lines):
        at -= 1  # after the last content line, then one blank line each side
    before = [""] if at > 0 else []
    return (
        [*lines[:at], *before, *block, "", *lines[at:]] if at < len(lines) else [*lines, *before, *block, ""]
    )


def _drop(aot: AoT, index: int) -> None:
    """Delete one [[instance]] but not the comment and blank lines that end it: in the file they lead
    into the next table (its heading comment), so they move before that table's header; after the last
    instance (the file's closing comments) they stay at the end of the one before."""
    trailer = _trailer(aot[index])
    del aot[index]
    if not trailer:
        return
    if index < len(aot):
        following = aot[index]
        following.trivia.indent = "".join(item.as_string() for item in trailer) + following.trivia.indent
    elif index > 0:
        box = _last_box(aot[index - 1])
        for item in trailer:
            box.add(item)


def _trailer(table: Table) -> list[Comment | Whitespace]:
    """The comment and blank lines at the end of `table`'s text."""
    body = _last_box(table).value.body
    cut = len(body)
    while cut > 0 and body[cut - 1][0] is None and isinstance(body[cut - 1][1], (Comment, Whitespace)):
        cut -= 1
    return [item for _, item in body[cut:] if isinstance(item, (Comment, Whitespace))]


def _last_box(table: Table) -> Table:
    """The table whose body ends where `table`'s text does (its last [x.y] sub-table, if any)."""
    while True:
        body = table.value.body
        if not body or body[-1][0] is None or not isinstance(body[-1][1], Table):
            return table
        table = body[-1][1]


def _session(doc: Any, old: Layout, new: Layout, placer: _Placer) -> None:
    changes = {
        k: getattr(new.session, k)
        for k in _SESSION_KEYS
        if getattr(new.session, k) != getattr(old.session, k)
    }
    if not changes:
        return
    table = doc.get("session")
    for key, value in changes.items():
        gone = value is None or (key, value) in (("allow_gpu_sharing", False), ("metrics_host", "127.0.0.1"))
        if table is None:
            if not gone:
                placer.top("session")[key] = value
        elif gone:
            with contextlib.suppress(KeyError):
                del table[key]
        else:
            _put(table, key, value, placer)


def _defaults(
    doc: Any, old: Mapping[str, object], new: Mapping[str, object], restore: Restorer, placer: _Placer
) -> None:
    """[defaults] as `new`: a shared flag one instance dropped leaves it (TOML cannot say "unset")."""
    if dict(old) == dict(new):
        return
    table = doc.get("defaults")
    if table is None:
        table = placer.top("defaults")
    for key in [*old, *(k for k in new if k not in old)]:
        if key in ("env", "flags"):
            _sub_table(
                table,
                key,
                mapping(old.get(key)),
                mapping(new.get(key)),
                {},
                lambda path, value: restore("", path, value),
                placer,
            )
        elif key not in new:
            with contextlib.suppress(KeyError):
                del table[key]
        elif old.get(key, _MISSING) != new[key]:
            _put(table, key, restore("", (key,), new[key]), placer)


def _instance(
    table: Any,
    old: Mapping[str, object],
    new: Mapping[str, object],
    effective: Mapping[str, object],
    restore: Callable[[KeyPath, object], object],
    placer: _Placer,
) -> None:
    for key in INSTANCE_KEYS:
        if key == "name":
            continue
        if key in ("env", "flags"):
            _sub_table(
                table,
                key,
                mapping(old[key]),
                mapping(new[key]),
                mapping(effective.get(key)),
                restore,
                placer,
            )
            continue
        value = new[key]
        if key in table:
            if value is None:
                if old[key] is not None:  # else: added to the file by hand, vtui has no word on it
                    del table[key]
            elif old[key] != value:
                _put(table, key, restore((key,), value), placer)
        elif value is not None and effective.get(key, _MISSING) != value:
            _put(table, key, restore((key,), value), placer)


def _sub_table(
    table: Any,
    key: str,
    old: dict[str, object],
    new: dict[str, object],
    inherited: dict[str, object],
    restore: Callable[[KeyPath, object], object],
    placer: _Placer,
) -> None:
    """One env/flags table: set what changed or is no longer inherited, delete what is gone."""
    for name in [*old, *(n for n in new if n not in old)]:
        own = table.get(key)  # afresh each time: tomlkit's view of dotted keys split by comments goes stale
        mine = own is not None and name in own
        if name not in new:
            if mine:
                del own[name]
            continue
        value = new[name]
        if (old.get(name, _MISSING) == value) if mine else (inherited.get(name, _MISSING) == value):
            continue
        if own is None:
            own = table.setdefault(key, {}) if type(table) is dict else placer.table(table, key)  # new: held
        _put(own, name, restore((key, name), value), placer)


def _put(table: Any, key: str, value: object, placer: _Placer) -> None:
    """Set `key`: in place when it exists or the table is new (held by the placer) or inline; a new key
    of a table in the file is placed after the table's last key/value line (`_Placer`)."""
    if key in table or not isinstance(table, Table):
        table[key] = value
    else:
        placer.key(table, key, value)
