"""vtui's frozen events and snapshots as JSON and back: what crosses the supervisor's socket.

One encoder/decoder pair per kind, by its dataclass: events (`core.events`), `InstanceStatus`,
`MetricsSample`, `GpuSample`, `StartupFacts`. Specs travel as the run records write them
(`runstate.spec_to_dict`: secret flag values masked).

The feed's JSON codec, both ends: `feed_line` (the supervisor's encoder of one NDJSON line) and
`loads` (the dashboard's decoder), with orjson: 5x faster to decode and 10x to encode than the
standard library on the feed's lines (`benchmarks/bench_ui_vs_htop.py`'s docstring has the figures).
What orjson refuses (a non-str key, an int past 64 bits; a NaN from an older supervisor) goes
through `json` instead; orjson writes a NaN or infinity as null.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from vtui.core.events import (
    Event,
    LogLines,
    Notice,
    OperationChanged,
    PhaseChanged,
    ProcessExited,
    StateChanged,
)
from vtui.core.runstate import spec_from_dict, spec_to_dict
from vtui.core.state import Phase, State
from vtui.core.status import InstanceStatus
from vtui.telemetry.facts import StartupFacts  # not startup_log: its rules' regexes cost the first frame
from vtui.telemetry.gpu import GpuInfo, GpuProcess, GpuSample
from vtui.telemetry.metrics import HistoryPoint, MetricsSample, Percentiles, RankSample

__all__ = [
    "decode_event",
    "decode_facts",
    "decode_gpu",
    "decode_sample",
    "decode_status",
    "encode_event",
    "encode_facts",
    "encode_gpu",
    "encode_sample",
    "encode_status",
    "dumps",
    "feed_line",
    "loads",
]


def feed_line(message: Any) -> bytes:
    """`message` as one feed line: compact JSON and its newline."""
    try:
        return orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # a non-str key, an int past 64 bits: json writes those
        return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def dumps(value: Any) -> bytes:
    """`value` as compact JSON (no newline)."""
    return feed_line(value)[:-1]


def loads(data: bytes | str) -> Any:
    """One feed line (or any JSON document) decoded."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # NaN/Infinity (json writes them), else json's own error
        return json.loads(data)


_EVENTS: dict[str, type] = {
    "state": StateChanged,
    "phase": PhaseChanged,
    "lines": LogLines,
    "exited": ProcessExited,
    "notice": Notice,
    "operation": OperationChanged,
}
_KIND = {cls: kind for kind, cls in _EVENTS.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, (State, Phase)):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


_EVENT_FIELDS: dict[type, tuple[str, ...]] = {}  # dataclasses.fields() per call costs more than the rest


def encode_event(event: Event) -> dict[str, Any]:
    names = _EVENT_FIELDS.get(type(event))
    if names is None:
        names = _EVENT_FIELDS[type(event)] = tuple(f.name for f in dataclasses.fields(event))
    data = {name: _plain(getattr(event, name)) for name in names}
    data["kind"] = _KIND[type(event)]
    return data


def decode_event(data: dict[str, Any]) -> Event:
    kind = data["kind"]
    if kind == "state":
        return StateChanged(
            data["instance"],
            State(data["old"]),
            State(data["new"]),
            data["at"],
            Phase(data["phase"]) if data.get("phase") else None,
            data.get("reason"),
        )
    if kind == "phase":
        return PhaseChanged(data["instance"], Phase(data["phase"]), data["at"])
    if kind == "lines":
        return LogLines(data["instance"], tuple(data["lines"]))
    if kind == "exited":
        return ProcessExited(data["instance"], data["pid"], data.get("returncode"), data["at"])
    if kind == "notice":
        return Notice(data.get("instance"), data["level"], data["text"])
    if kind == "operation":
        return OperationChanged(data["instance"], data.get("running"), data.get("waiting"), data["at"])
    raise ValueError(f"unknown event kind {kind!r}")


def encode_status(status: InstanceStatus, **extra: Any) -> dict[str, Any]:
    return {
        "name": status.name,
        "spec": spec_to_dict(status.spec),
        "state": status.state.value,
        "phase": status.phase.value if status.phase else None,
        "pid": status.pid,
        "started_at": status.started_at,
        "restarts": status.restarts,
        "last_error": status.last_error,
        "log_path": str(status.log_path) if status.log_path else None,
        "adopted": status.adopted,
        "last_good_spec": spec_to_dict(status.last_good_spec) if status.last_good_spec else None,
        "next_restart_at": status.next_restart_at,
        "failed_at": status.failed_at,
        "diagnosis": status.diagnosis,
        "operation": status.operation,
        "waiting": status.waiting,
        **extra,
    }


def decode_status(data: dict[str, Any]) -> InstanceStatus:
    return InstanceStatus(
        name=data["name"],
        spec=spec_from_dict(data["spec"]),
        state=State(data["state"]),
        phase=Phase(data["phase"]) if data.get("phase") else None,
        pid=data.get("pid"),
        started_at=data.get("started_at"),
        restarts=data.get("restarts", 0),
        last_error=data.get("last_error"),
        log_path=Path(data["log_path"]) if data.get("log_path") else None,
        adopted=bool(data.get("adopted")),
        last_good_spec=spec_from_dict(data["last_good_spec"]) if data.get("last_good_spec") else None,
        next_restart_at=data.get("next_restart_at"),
        failed_at=data.get("failed_at"),
        diagnosis=data.get("diagnosis"),
        operation=data.get("operation"),
        waiting=data.get("waiting"),
    )


_PERCENTILE_FIELDS = {
    f.name for f in dataclasses.fields(MetricsSample) if f.type in ("Percentiles", Percentiles)
}
_SAMPLE_FIELDS = tuple(f.name for f in dataclasses.fields(MetricsSample))
_RANK_FIELDS = tuple(f.name for f in dataclasses.fields(RankSample))


def encode_sample(sample: MetricsSample) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name in _SAMPLE_FIELDS:
        value = getattr(sample, name)
        if isinstance(value, Percentiles):
            value = {"p50": value.p50, "p95": value.p95, "p99": value.p99}
        elif isinstance(value, Mapping):
            value = dict(value)
        elif name == "ranks":
            value = [{f: getattr(rank, f) for f in _RANK_FIELDS} for rank in value]
        data[name] = value
    return data


_SAMPLE_FIELD_SET = frozenset(_SAMPLE_FIELDS)


_BOUNDS: dict[tuple[float, ...], tuple[float, ...]] = {}  # one tuple per bucket layout, shared


def _shared_bounds(bounds: list[float]) -> tuple[float, ...]:
    key = tuple(bounds)
    if len(_BOUNDS) > 64:  # bounded: a few layouts (TTFT, ITL) per vLLM version in practice
        _BOUNDS.clear()
    return _BOUNDS.setdefault(key, key)


def decode_sample(data: dict[str, Any]) -> MetricsSample:
    """A sample as compact as it can be held (the feed decodes one per instance a second): what is empty
    takes the dataclass's shared default, names are interned, and the histograms' bucket bounds (alike
    in every sample) are one tuple (`benchmarks/bench_sample_memory.py` has the sizes)."""
    values: dict[str, Any] = {}
    for k, v in data.items():
        if k not in _SAMPLE_FIELD_SET or (not v and isinstance(v, (dict, list))):
            continue  # an empty mapping or list: the shared default
        values[k] = sys.intern(v) if isinstance(v, str) else v
    for name in _PERCENTILE_FIELDS:
        value = values.get(name)
        if isinstance(value, dict):
            if all(value.get(q) is None for q in ("p50", "p95", "p99")):
                del values[name]  # NO_PERCENTILES, shared
            else:
                values[name] = Percentiles(**value)
    if isinstance(values.get("windowed"), dict):
        values["windowed"] = {
            role: (_shared_bounds(pair[0]), tuple(pair[1]))
            for role, pair in values["windowed"].items()
            if len(pair) == 2
        }
    if isinstance(values.get("ranks"), list):
        values["ranks"] = tuple(
            RankSample(**{k: v for k, v in rank.items() if k in _RANK_FIELDS})
            for rank in values["ranks"]
            if isinstance(rank, dict)
        )
    return MetricsSample(**values)


_POINT_FIELDS = tuple(f.name for f in dataclasses.fields(HistoryPoint) if f.name != "ttft_p95")


def point_of(encoded: Mapping[str, Any]) -> dict[str, Any]:
    """An encoded sample cut to a HistoryPoint's figures (`GET /history?fields=points`): about a tenth
    of its bytes, for a dashboard's 600-sample backfill of each instance."""
    point = {k: encoded.get(k) for k in _POINT_FIELDS}
    ttft = encoded.get("ttft")
    point["ttft"] = {"p95": ttft.get("p95")} if isinstance(ttft, Mapping) else None
    return point


def decode_point(data: Mapping[str, Any]) -> HistoryPoint:
    """A HistoryPoint from an encoded sample, whole or cut by `point_of`."""
    ttft = data.get("ttft")
    p95 = ttft.get("p95") if isinstance(ttft, Mapping) else None
    figures: dict[str, Any] = {k: data.get(k) for k in _POINT_FIELDS}
    return HistoryPoint(**figures, ttft_p95=p95)


def encode_gpu(sample: GpuSample) -> dict[str, Any]:
    """As dataclasses.asdict, without its deep copies (once a second per session)."""
    return {
        "available": sample.available,
        "reason": sample.reason,
        "gpus": [dict(g.__dict__) for g in sample.gpus],
        "processes": [dict(p.__dict__) for p in sample.processes],
        "at": sample.at,
        "source": sample.source,
    }


def decode_gpu(data: dict[str, Any]) -> GpuSample:
    return GpuSample(
        available=data["available"],
        reason=data.get("reason"),
        gpus=tuple(GpuInfo(**g) for g in data.get("gpus", ())),
        processes=tuple(GpuProcess(**p) for p in data.get("processes", ())),
        at=data["at"],
        source=data.get("source"),
    )


def encode_facts(facts: StartupFacts) -> dict[str, Any]:
    data = {f.name: getattr(facts, f.name) for f in dataclasses.fields(StartupFacts)}
    for key in ("non_default_args", "args"):
        if data[key] is not None:
            data[key] = {k: _jsonable(v) for k, v in dict(data[key]).items()}
    data["phase"] = facts.phase.value if facts.phase else None
    return data


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def decode_facts(data: dict[str, Any]) -> StartupFacts:
    known = {f.name for f in dataclasses.fields(StartupFacts)}
    values = {k: v for k, v in data.items() if k in known}
    values["phase"] = Phase(values["phase"]) if values.get("phase") else None
    return StartupFacts(**values)
