"""Saving a layout into the file it was read from by changing only what differs, so the user's comments,
key order, formatting and untouched `${VAR}` strings survive (a tomlkit round trip of the original text).

`edit_text` compares the file's own `Layout` with the one to save, value by effective value: a key is
written only where the saved value differs from what the file already gives that instance (its own key,
else `[defaults]`, else the built-in default). Added instances are appended as the full rewrite would
write them. It answers None when the change cannot be made in place (instances reordered, instances
written as an inline array): the caller then writes the whole file anew. `vtui.core.layout` validates
the result either way before anything reaches the disk.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import tomlkit
from tomlkit.items import AoT, Table

from vtui.core.layout_dump import (
    BUILTIN_DEFAULTS,
    Restorer,
    emit_table,
    instance_table,
    instance_values,
    origin,
    plain,
    shared_defaults,
)
from vtui.core.layout_rules import INSTANCE_KEYS
from vtui.core.model import Layout

__all__ = ["edit_text"]

_MISSING = object()
_SESSION_KEYS = ("name", "allow_gpu_sharing", "gpu_hour_price", "gpu_memory_gib")


def edit_text(text: str, old: Layout, new: Layout) -> str | None:
    """`text` (the file `old` was read from) changed where `new` differs; None: not possible in place."""
    restore = Restorer(origin(new.path))
    defaults = {k: plain(v) for k, v in shared_defaults(new).items()}
    effective = {**BUILTIN_DEFAULTS, **defaults}
    doc = tomlkit.parse(text)
    aot = doc.get("instance")
    if not isinstance(aot, AoT):
        return None
    kept = [n for n in old.names() if n in new.names()]
    added = [n for n in new.names() if n not in old.names()]
    if kept + added != new.names():
        return None  # reordered: the full rewrite says it plainly
    _session(doc, old, new)
    _defaults(doc, old.defaults, defaults, restore)
    for index in reversed(range(len(aot))):
        name = str(aot[index].get("name", ""))
        if name not in new.names():
            del aot[index]
    for table in aot:
        name = str(table.get("name", ""))
        _instance(table, instance_values(old.instance(name)), instance_values(new.instance(name)), effective,
                  lambda path, value, name=name: restore(name, path, value))
    out = tomlkit.dumps(doc)
    for name in added:
        block = emit_table("instance", instance_table(new.instance(name), effective, restore), array=True)
        out = out.rstrip("\n") + "\n\n" + "\n".join(block) + "\n"
    return out


def _session(doc: Any, old: Layout, new: Layout) -> None:
    changes = {k: getattr(new.session, k) for k in _SESSION_KEYS
               if getattr(new.session, k) != getattr(old.session, k)}
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
        if value is None or (key == "allow_gpu_sharing" and value is False):
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
            doc._insert_after("session", "defaults", table) if "session" in doc else \
                doc._insert_at(0, "defaults", table)
        except Exception:  # noqa: BLE001
            doc["defaults"] = table
        table = doc["defaults"]
    for key in [*old, *(k for k in new if k not in old)]:
        if key in ("env", "flags"):
            _sub_table(table, key, dict(old.get(key) or {}), dict(new.get(key) or {}), {},  # type: ignore[call-overload]
                       lambda path, value: restore("", path, value))
        elif key not in new:
            with contextlib.suppress(KeyError):
                del table[key]
        elif old.get(key, _MISSING) != new[key]:
            _put(table, key, restore("", (key,), new[key]))


def _instance(table: Any, old: Mapping[str, object], new: Mapping[str, object],
              effective: Mapping[str, object], restore: Callable[[tuple, object], object]) -> None:
    for key in INSTANCE_KEYS:
        if key == "name":
            continue
        if key in ("env", "flags"):
            _sub_table(table, key, dict(old[key]), dict(new[key]),  # type: ignore[call-overload]
                       dict(effective.get(key) or {}), restore)  # type: ignore[call-overload]
            continue
        value = new[key]
        if key in table:
            if value is None:
                del table[key]
            elif old[key] != value:
                _put(table, key, restore((key,), value))
        elif value is not None and effective.get(key, _MISSING) != value:
            _put(table, key, restore((key,), value))


def _sub_table(table: Any, key: str, old: dict[str, object], new: dict[str, object],
               inherited: dict[str, object], restore: Callable[[tuple, object], object]) -> None:
    """One env/flags table: set what changed or is no longer inherited, delete what is gone."""
    own = table.get(key)
    for name in [*old, *(n for n in new if n not in old)]:
        mine = own is not None and name in own
        if name not in new:
            if mine:
                del own[name]
            continue
        value = new[name]
        if (old.get(name, _MISSING) == value) if mine else (inherited.get(name, _MISSING) == value):
            continue
        if own is None:
            table[key] = tomlkit.table()
            own = table[key]
        _put(own, name, restore((key, name), value))


def _put(table: Any, key: str, value: object) -> None:
    """Set `key`: in place when it exists; a new key goes right after the table's last key/value line,
    not after the comments and blank lines that lead into the next table."""
    if key in table or not isinstance(table, Table):
        table[key] = value
        return
    body = table.value.body
    last = next((k for k, item in reversed(body) if k is not None and not isinstance(item, (Table, AoT))), None)
    if last is None:
        table[key] = value
        return
    table.value._insert_after(last, key, value)
