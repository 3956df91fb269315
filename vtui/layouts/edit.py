"""Saving a layout into the file it was read from by changing only what differs, so the user's comments,
key order, formatting and untouched `${VAR}` strings survive (a tomlkit round trip of the original text).

`edit_text` compares the file's own `Layout` with the one to save, value by effective value: a key is
written only where the saved value differs from what the file already gives that instance (its own key,
else `[defaults]`, else the built-in default). Added instances are appended as the full rewrite would
write them. It answers None when the change cannot be made in place (instances reordered, instances
written as an inline array): the caller then writes the whole file anew. `vtui.layouts` validates
the result either way before anything reaches the disk.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import tomlkit
from tomlkit.items import AoT, Comment, Table, Whitespace

from vtui.core.model import Layout
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

__all__ = ["edit_text"]

_MISSING = object()
_SESSION_KEYS = (
    "name",
    "allow_gpu_sharing",
    "gpu_hour_price",
    "gpu_memory_gib",
    "metrics_port",
    "metrics_host",
)


def edit_text(text: str, old: Layout, new: Layout) -> str | None:
    """`text` (the file `old` was read from) changed where `new` differs; None: not possible in place."""
    restore = Restorer(new.templates)
    defaults = {k: plain(v) for k, v in shared_defaults(new).items()}
    effective = {**BUILTIN_DEFAULTS, **defaults}
    doc = tomlkit.parse(text)
    aot = doc.get("instance")
    if not isinstance(aot, AoT):
        return None
    olds = {spec.name: spec for spec in old.instances}
    news = {spec.name: spec for spec in new.instances}  # by name: a big layout is no quadratic walk
    kept = [n for n in olds if n in news]
    added = [n for n in news if n not in olds]
    if kept + added != list(news):
        return None  # reordered: the full rewrite says it plainly
    _session(doc, old, new)
    _defaults(doc, old.defaults, defaults, restore)
    same_defaults = {k: plain(v) for k, v in old.defaults.items()} == defaults
    for index in reversed(range(len(aot))):
        name = str(aot[index].get("name", ""))
        if name not in news:
            _drop(aot, index)
    for table in aot:
        name = str(table.get("name", ""))
        before, after = olds[name], news[name]
        if before == after and same_defaults:
            continue  # the same instance under the same [defaults]: nothing to write
        _instance(
            table,
            instance_values(before),
            instance_values(after),
            effective,
            _scoped(restore, name),
        )
    out = tomlkit.dumps(doc)
    for name in added:
        block = emit_table("instance", instance_table(news[name], effective, restore), array=True)
        out = out.rstrip("\n") + "\n\n" + "\n".join(block) + "\n"
    if "\r\n" in text and "\n" not in text.replace("\r\n", ""):
        out = out.replace("\r\n", "\n").replace("\n", "\r\n")  # new lines as the file's own (CRLF)
    return out


def _scoped(restore: Restorer, name: str) -> Callable[[tuple, object], object]:
    """`restore` for one instance's keys."""
    return lambda path, value: restore(name, path, value)


def _drop(aot: AoT, index: int) -> None:
    """Delete one [[instance]] but not the comment and blank lines that end it: in the file they lead
    into the next table (its heading comment), so they move before that table's header; after the last
    instance (the file's closing comments) they stay at the end of the one before."""
    trailer = _take_trailer(aot[index])
    del aot[index]
    if not trailer:
        return
    if index < len(aot):
        following = aot[index]
        following.trivia.indent = "".join(item.as_string() for _, item in trailer) + following.trivia.indent
    elif index > 0:
        _last_box(aot[index - 1]).value.body.extend(trailer)


def _take_trailer(table: Table) -> list:
    """Remove and return the comment and blank lines at the end of `table`'s text."""
    body = _last_box(table).value.body
    cut = len(body)
    while cut > 0 and body[cut - 1][0] is None and isinstance(body[cut - 1][1], (Comment, Whitespace)):
        cut -= 1
    trailer = body[cut:]
    del body[cut:]
    return trailer


def _last_box(table: Table) -> Table:
    """The table whose body ends where `table`'s text does (its last [x.y] sub-table, if any)."""
    while True:
        body = table.value.body
        if not body or body[-1][0] is None or not isinstance(body[-1][1], Table):
            return table
        table = body[-1][1]


def _session(doc: Any, old: Layout, new: Layout) -> None:
    changes = {
        k: getattr(new.session, k)
        for k in _SESSION_KEYS
        if getattr(new.session, k) != getattr(old.session, k)
    }
    if not changes:
        return
    table = doc.get("session")
    if table is None:
        table = tomlkit.table()
        try:
            doc._insert_at(0, "session", table)  # the top of the file, where a full rewrite puts it
        except Exception:  # noqa: BLE001 - tomlkit's private API moved: the end of the file is valid too
            doc["session"] = table
        table = doc["session"]
    for key, value in changes.items():
        if value is None or (key, value) in (("allow_gpu_sharing", False), ("metrics_host", "127.0.0.1")):
            with contextlib.suppress(KeyError):
                del table[key]
        else:
            _put(table, key, value)


def _defaults(doc: Any, old: Mapping[str, object], new: Mapping[str, object], restore: Restorer) -> None:
    """[defaults] as `new`: a shared flag one instance dropped leaves it (TOML cannot say "unset")."""
    if dict(old) == dict(new):
        return
    table = doc.get("defaults")
    if table is None:
        table = tomlkit.table()
        try:
            doc._insert_after("session", "defaults", table) if "session" in doc else doc._insert_at(
                0, "defaults", table
            )
        except Exception:  # noqa: BLE001
            doc["defaults"] = table
        table = doc["defaults"]
    for key in [*old, *(k for k in new if k not in old)]:
        if key in ("env", "flags"):
            _sub_table(
                table,
                key,
                mapping(old.get(key)),
                mapping(new.get(key)),
                {},
                lambda path, value: restore("", path, value),
            )
        elif key not in new:
            with contextlib.suppress(KeyError):
                del table[key]
        elif old.get(key, _MISSING) != new[key]:
            _put(table, key, restore("", (key,), new[key]))


def _instance(
    table: Any,
    old: Mapping[str, object],
    new: Mapping[str, object],
    effective: Mapping[str, object],
    restore: Callable[[tuple, object], object],
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
            )
            continue
        value = new[key]
        if key in table:
            if value is None:
                del table[key]
            elif old[key] != value:
                _put(table, key, restore((key,), value))
        elif value is not None and effective.get(key, _MISSING) != value:
            _put(table, key, restore((key,), value))


def _sub_table(
    table: Any,
    key: str,
    old: dict[str, object],
    new: dict[str, object],
    inherited: dict[str, object],
    restore: Callable[[tuple, object], object],
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
            trailer = _take_trailer(table)  # the next table's heading comments stay before it
            table[key] = tomlkit.table()
            own = table[key]
            own.value.body.extend(trailer)
        _put(own, name, restore((key, name), value))


def _put(table: Any, key: str, value: object) -> None:
    """Set `key`: in place when it exists; a new key goes right after the table's last key/value line
    (else under its header), not after the comments and blank lines that lead into the next table."""
    if key in table or not isinstance(table, Table):
        table[key] = value
        return
    body = table.value.body
    last = next(
        (k for k, item in reversed(body) if k is not None and not isinstance(item, (Table, AoT))), None
    )
    if last is None:  # only comments (maybe the next table's): the key goes right under the header
        if body:
            table.value._insert_at(0, key, value)
        else:
            table[key] = value
        return
    table.value._insert_after(last, key, value)
