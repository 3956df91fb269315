"""Three-way merge of layouts, for a save into a file that changed on disk since vtui read it.

`base` is the layout as read, `disk` the file as it is now, `new` what vtui saves. A value vtui did not
change keeps the file's (a key added or changed by hand stays); a value vtui changed takes vtui's. Where
both changed one value differently, or one side removed an instance the other changed, that is a
conflict: the save is refused and the conflicting keys are named, the way an editor asks before it
overwrites a file changed behind it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TypeVar

from vtui.core.model import InstanceSpec, Layout, SessionSpec

__all__ = ["Merge", "changed_keys", "merge"]

_GONE = object()
_Spec = TypeVar("_Spec", SessionSpec, InstanceSpec)


@dataclass(frozen=True)
class Merge:
    layout: Layout  # what the file should hold after the save
    conflicts: tuple[str, ...]  # dotted keys both sides changed differently ("instance[a].flags.seed")
    on_disk: tuple[str, ...]  # dotted keys changed on disk since the read (what the user did by hand)


def merge(base: Layout, disk: Layout, new: Layout) -> Merge:
    if _content(base) == _content(disk):
        return Merge(new, (), ())
    conflicts: list[str] = []
    on_disk = changed_keys(base, disk)
    session = _merge_dataclass(base.session, disk.session, new.session, "session", conflicts)
    defaults = _merge_map(base.defaults, disk.defaults, new.defaults, "defaults", conflicts)
    bases = {s.name: s for s in base.instances}
    disks = {s.name: s for s in disk.instances}
    news = {s.name: s for s in new.instances}
    out: list[InstanceSpec] = []
    for spec in disk.instances:  # the file's order, hand-added instances kept
        name = spec.name
        where = f"instance[{name}]"
        if name not in bases:
            if name in news and news[name] != spec:
                conflicts.append(where)  # added on both sides, differently
            out.append(spec)
        elif name in news:
            out.append(_merge_dataclass(bases[name], spec, news[name], where, conflicts))
        elif spec != bases[name]:
            conflicts.append(where)  # vtui removed an instance changed by hand
    for name, spec in news.items():
        if name in bases and name not in disks and spec != bases[name]:
            conflicts.append(f"instance[{name}]")  # removed by hand, changed by vtui
        elif name not in bases and name not in disks:
            out.append(spec)  # added by vtui
    layout = replace(new, session=session, defaults=defaults, instances=tuple(out))
    return Merge(layout, tuple(conflicts), on_disk)


def changed_keys(a: Layout, b: Layout) -> tuple[str, ...]:
    """The dotted keys whose values differ between two layouts (instances by name)."""
    out: list[str] = []
    _diff(_flat_session(a.session), _flat_session(b.session), "session", out)
    _diff(dict(a.defaults), dict(b.defaults), "defaults", out)
    aa, bb = {s.name: s for s in a.instances}, {s.name: s for s in b.instances}
    for name in [*aa, *(n for n in bb if n not in aa)]:
        if name not in aa or name not in bb:
            out.append(f"instance[{name}]")
        else:
            _diff(_flat(aa[name]), _flat(bb[name]), f"instance[{name}]", out)
    return tuple(out)


def _content(layout: Layout) -> tuple[object, ...]:
    return (layout.session, layout.defaults, layout.instances)


def _flat(spec: InstanceSpec) -> dict[str, object]:
    return {f.name: getattr(spec, f.name) for f in fields(spec)}


def _flat_session(spec: SessionSpec) -> dict[str, object]:
    return {f.name: getattr(spec, f.name) for f in fields(spec)}


def _diff(a: Mapping[str, object], b: Mapping[str, object], where: str, out: list[str]) -> None:
    for key in [*a, *(k for k in b if k not in a)]:
        x, y = a.get(key, _GONE), b.get(key, _GONE)
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            _diff(x, y, f"{where}.{key}", out)
        elif x != y:
            out.append(f"{where}.{key}")


def _pick(base: object, disk: object, new: object, where: str, conflicts: list[str]) -> object:
    if new == base:
        return disk
    if disk != base and disk != new:
        conflicts.append(where)
    return new


def _merge_map(
    base: Mapping[str, object],
    disk: Mapping[str, object],
    new: Mapping[str, object],
    where: str,
    conflicts: list[str],
) -> dict[str, object]:
    out: dict[str, object] = {}
    for key in dict.fromkeys([*disk, *new, *base]):
        b, d, n = base.get(key, _GONE), disk.get(key, _GONE), new.get(key, _GONE)
        if all(isinstance(v, Mapping) for v in (b, d, n)):
            value: object = _merge_map(b, d, n, f"{where}.{key}", conflicts)  # type: ignore[arg-type]
        else:
            value = _pick(b, d, n, f"{where}.{key}", conflicts)
        if value is not _GONE:
            out[key] = value
    return out


def _merge_dataclass(base: _Spec, disk: _Spec, new: _Spec, where: str, conflicts: list[str]) -> _Spec:
    changes: dict[str, object] = {}
    for f in fields(new):
        b, d, n = getattr(base, f.name), getattr(disk, f.name), getattr(new, f.name)
        if isinstance(n, Mapping) and isinstance(b, Mapping) and isinstance(d, Mapping):
            changes[f.name] = _merge_map(b, d, n, f"{where}.{f.name}", conflicts)
        else:
            changes[f.name] = _pick(b, d, n, f"{where}.{f.name}", conflicts)
    return replace(new, **changes)  # type: ignore[arg-type]
