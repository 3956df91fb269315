"""Layouts -> TOML text: the full rewrite (`dump_layout`) and the pieces the in-place editor shares.

Instances list only what differs from `[defaults]` and the built-in defaults; values that came from a
`${VAR}` reference, and are unchanged, are written back as the reference (`Restorer`), so a save never
writes a secret taken from the environment.
"""

from __future__ import annotations

from collections.abc import Mapping

import tomli_w

from vtui.core.model import InstanceSpec, KeyPath, Layout, RestartPolicy, Templates
from vtui.layouts.keys import INSTANCE_KEYS

__all__ = [
    "BUILTIN_DEFAULTS",
    "Restorer",
    "dump_layout",
    "emit_table",
    "instance_table",
    "instance_values",
    "mapping",
    "plain",
    "shared_defaults",
]


BUILTIN_DEFAULTS: Mapping[str, object] = {
    "engine": "vllm",
    "gpus": [],
    "host": "127.0.0.1",
    "command": None,
    "restart": "on-failure",
    "max_restarts": 3,
    "backoff": 2.0,
    "backoff_max": 60.0,
    "start_stagger": 0.0,
    "start_timeout": RestartPolicy().start_timeout,
    "url": None,
    "api_key": None,
    "replicas": 1,
    "router_port": None,
    "router_metrics_port": None,
    "replica_gpus": [],
    "restart_unhealthy_after": RestartPolicy().restart_unhealthy_after,
    "restart_stuck_after": RestartPolicy().restart_stuck_after,
    "sleep_mode": False,
    "idle_sleep_after": 0.0,
    "force_start": False,
    "backend": "cuda",
}

# What an attached server's table holds (the rest is about launching one; its host and port are the url's).
_EXTERNAL_VALUES = ("name", "engine", "url", "api_key", "model")


def instance_values(spec: InstanceSpec) -> dict[str, object]:
    values = _all_values(spec)
    if spec.engine == "external":
        return {k: (v if k in _EXTERNAL_VALUES and v != "" else None) for k, v in values.items()}
    return values


def _all_values(spec: InstanceSpec) -> dict[str, object]:
    return {
        "name": spec.name,
        "model": spec.model,
        "engine": spec.engine,
        "gpus": list(spec.gpus),
        "port": spec.port,
        "host": spec.host,
        "command": list(spec.command) if spec.command else None,
        "restart": spec.restart.mode,
        "max_restarts": spec.restart.max_restarts,
        "backoff": spec.restart.backoff_initial,
        "backoff_max": spec.restart.backoff_max,
        "start_stagger": spec.start_stagger,
        "start_timeout": spec.restart.start_timeout,
        "restart_unhealthy_after": spec.restart.restart_unhealthy_after,
        "restart_stuck_after": spec.restart.restart_stuck_after,
        "sleep_mode": spec.sleep_mode,
        "idle_sleep_after": spec.idle_sleep_after,
        "force_start": spec.force_start,
        "backend": spec.backend,
        "env": dict(spec.env),
        "flags": dict(spec.flags),
        "url": spec.url,
        "api_key": spec.api_key,
        "replicas": spec.replicas,
        "router_port": spec.router_port,
        "router_metrics_port": spec.router_metrics_port,
        "replica_gpus": [list(g) for g in spec.replica_gpus],
    }


def shared_defaults(layout: Layout) -> dict[str, object]:
    """The [defaults] to write: a flag/env default every instance still has (TOML cannot say "unset")."""
    defaults = {key: value for key, value in layout.defaults.items()}
    for table in ("env", "flags"):
        if table in defaults:
            kept = {
                k: v
                for k, v in dict(defaults[table]).items()  # type: ignore[call-overload]
                if all(k in getattr(spec, table) for spec in layout.instances)
            }
            defaults[table] = kept
            if not kept:
                del defaults[table]
    return defaults


def dump_layout(layout: Layout) -> str:
    """The layout as TOML: instances list only what differs from [defaults]; `${VAR}` kept, not values."""
    restore = Restorer(layout.templates)
    session: dict[str, object] = {"name": layout.session.name}
    if layout.session.allow_gpu_sharing:
        session["allow_gpu_sharing"] = True
    if layout.session.metrics_host != "127.0.0.1":
        session["metrics_host"] = layout.session.metrics_host
    for key in (
        "gpu_hour_price",
        "gpu_memory_gib",
        "on_event",
        "webhook",
        "on_event_cooldown",
        "metrics_port",
    ):
        if getattr(layout.session, key) is not None:
            value = getattr(layout.session, key)
            session[key] = list(value) if isinstance(value, tuple) else value
    doc: dict[str, object] = {"session": session}
    defaults = shared_defaults(layout)
    if defaults:
        doc["defaults"] = {k: restore("", (k,), plain(v)) for k, v in defaults.items()}
    effective = {**BUILTIN_DEFAULTS, **{k: plain(v) for k, v in defaults.items()}}
    doc["instance"] = [instance_table(spec, effective, restore) for spec in layout.instances]
    return _emit(doc)


def instance_table(
    spec: InstanceSpec, effective: Mapping[str, object], restore: Restorer
) -> dict[str, object]:
    """One [[instance]] as written: only what differs from the effective defaults."""
    values = instance_values(spec)
    table: dict[str, object] = {"name": spec.name}
    for key in INSTANCE_KEYS:
        value = values[key]
        if key in ("name",) or value is None:
            continue
        if key in ("env", "flags"):
            inherited = mapping(effective.get(key))
            value = {k: v for k, v in mapping(value).items() if k not in inherited or inherited[k] != v}
            if not value:
                continue
        elif key != "port" and key in effective and effective[key] == value:
            continue
        table[key] = restore(spec.name, (key,), value)
    return table


def _toml_value(value: object) -> str:
    """One value on one line (tomli-w escapes scalars; arrays stay inline: `gpus = [0, 1]`)."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return tomli_w.dumps({"v": value})[len("v = ") :].rstrip("\n")


def _toml_key(key: str) -> str:
    return tomli_w.dumps({key: 0}).rsplit(" = ", 1)[0]


def emit_table(header: str, table: Mapping[str, object], array: bool = False) -> list[str]:
    lines = [f"[[{header}]]" if array else f"[{header}]"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, Mapping)]
    for key, sub in table.items():
        if isinstance(sub, Mapping):
            lines += ["", f"[{header}.{_toml_key(key)}]"]
            lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in sub.items()]
    return lines


def _emit(doc: Mapping[str, object]) -> str:
    """[session], [defaults], then one [[instance]] block each (sub-tables as [instance.flags])."""
    blocks = [emit_table(key, doc[key]) for key in ("session", "defaults") if key in doc]  # type: ignore[arg-type]
    blocks += [emit_table("instance", table, array=True) for table in doc["instance"]]  # type: ignore[attr-defined]
    return "\n\n".join("\n".join(block) for block in blocks) + "\n"


def mapping(value: object) -> dict[str, object]:
    """A table's keys and values (env, flags), {} for anything else (absent, None)."""
    return dict(value) if isinstance(value, Mapping) else {}


def plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class Restorer:
    """Puts `${VAR}` references back where the value is what one expanded to: the same key of the same
    instance first, else of [defaults] (a shared flag moved into the instances that keep it), else of
    any instance of the file (an instance added as a copy of another), so a secret is never written."""

    def __init__(self, templates: Templates) -> None:
        self.templates = templates
        self._anywhere: dict[tuple[KeyPath, str], str] = {}  # (key path, value) -> raw, first instance wins
        for (_, where), (expanded, raw) in templates.items():
            self._anywhere.setdefault((where, expanded), raw)

    def __call__(self, scope: str, path: KeyPath, value: object) -> object:
        if isinstance(value, dict):
            return {k: self(scope, (*path, k), v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(scope, (*path, i), v) for i, v in enumerate(value)]
        if isinstance(value, str):
            for key in ((scope, path), ("", path)):
                remembered = self.templates.get(key)
                if remembered and remembered[0] == value:
                    return remembered[1]
            raw = self._anywhere.get((path, value))
            if raw is not None:
                return raw
        return value
