"""Run records: what vtui started (pid + create time, session, port, log, argv, flags), one JSON file
per instance in `paths.runs_dir()` (0600), so a later vtui or `vtui ps` can re-adopt live instances and
never mistake a recycled pid for one.

Records are keyed by session name + instance name. Beside them, in `outcomes/`, one `Outcome` per
instance: how its last run ended (failed, crashed, stopped: the error, the diagnosis kind, the flags
it ran with, its restart count, when), kept after the process is gone so a later supervisor reports
what happened rather than a blank STOPPED; a start the user asks for (or READY) removes it. Secret flag values (api-key) are masked everywhere a
record holds flags (`flags`, `last_good_flags`, `spec`): the layout (or `${VAR}`) stays their only source.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vtui.core import paths
from vtui.core.atomic import atomic_write_text, sweep_stale_temps
from vtui.core.masking import MASK, SECRET_FLAGS, masked

__all__ = [  # MASK and masked live in core.masking; imported from here too
    "MASK",
    "Outcome",
    "RunRecord",
    "RunStore",
    "masked",
    "merge_flags",
    "spec_from_dict",
    "spec_to_dict",
]
from vtui.core.model import InstanceSpec, RestartPolicy


def spec_to_dict(spec: InstanceSpec) -> dict[str, Any]:
    flags = masked(spec.flags)
    return {
        "name": spec.name,
        "model": spec.model,
        "port": spec.port,
        "engine": spec.engine,
        "gpus": list(spec.gpus),
        "host": spec.host,
        "env": dict(spec.env),
        "flags": flags,
        "command": list(spec.command) if spec.command is not None else None,
        "restart": asdict(spec.restart),
        "start_stagger": spec.start_stagger,
        "sleep_mode": spec.sleep_mode,
        "idle_sleep_after": spec.idle_sleep_after,
        "force_start": spec.force_start,
        "backend": spec.backend,
        **({"url": spec.url} if spec.url else {}),  # an attached server's (its api_key stays home)
        "group": spec.group,
    }


def spec_from_dict(data: dict[str, Any]) -> InstanceSpec:
    return InstanceSpec(
        name=data["name"],
        model=data["model"],
        port=int(data["port"]),
        engine=data.get("engine", "vllm"),
        gpus=tuple(data.get("gpus", ())),
        host=data.get("host", "127.0.0.1"),
        env=data.get("env") or {},
        flags=data.get("flags") or {},
        command=tuple(data["command"]) if data.get("command") else None,
        restart=RestartPolicy(**(data.get("restart") or {})),
        start_stagger=float(data.get("start_stagger", 0.0)),
        sleep_mode=bool(data.get("sleep_mode", False)),
        idle_sleep_after=float(data.get("idle_sleep_after", 0.0)),
        force_start=bool(data.get("force_start", False)),
        backend=str(data.get("backend", "cuda")),
        url=data.get("url"),
        group=data.get("group"),
    )


def merge_flags(layout_spec: InstanceSpec, recorded_flags: dict[str, Any]) -> InstanceSpec:
    """The layout's spec running with the recorded flags (secrets still from the layout)."""
    flags = {k: v for k, v in recorded_flags.items() if k not in SECRET_FLAGS}
    flags.update({k: v for k, v in layout_spec.flags.items() if k in SECRET_FLAGS})
    return layout_spec.with_flags(flags, unset=tuple(layout_spec.flags))


@dataclass
class RunRecord:
    session: str
    name: str
    pid: int
    create_time: float
    pgid: int
    sid: int
    port: int
    log_path: str
    argv: list[str]
    flags: dict[str, Any]
    spec: dict[str, Any]
    started_at: float
    pump_pid: int | None = None
    restarts: int = 0
    last_state: str = "starting"
    last_error: str | None = None
    last_good_flags: dict[str, Any] | None = None
    layout_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.session}/{self.name}"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Outcome:
    """How an instance's last run ended, kept once its process is gone (`RunStore.save_outcome`).
    `state`: "failed", "crashed" or "stopped"; `flags`: what it ran with (applied, saved to the
    layout or not; secrets masked); `pid`: the process that ran, for the record only (an outcome never
    makes a pid adoptable)."""

    session: str
    name: str
    state: str
    at: float
    flags: dict[str, Any]
    restarts: int = 0
    last_error: str | None = None
    diagnosis: str | None = None
    failed_at: float | None = None
    pid: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class PendingOperation:
    """A restart under way, written before it stops anything and removed when it ends: a supervisor
    killed in the middle leaves it, and the next one finishes it (`supervisor_adopt`). `flags`: what
    it starts with; `before`: what ran before it (secrets masked in both)."""

    session: str
    name: str
    label: str
    at: float
    flags: dict[str, Any]
    before: dict[str, Any]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingOperation:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


class RunStore:
    """Reads and writes run records in one folder (default: `paths.runs_dir()`)."""

    def __init__(self, folder: Path | None = None) -> None:
        self._folder = folder

    @property
    def folder(self) -> Path:
        if self._folder is None:
            return paths.runs_dir()
        self._folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self._folder

    def path(self, session: str, name: str) -> Path:
        return self.folder / f"{_safe(session)}.{_safe(name)}.json"

    def save(self, record: RunRecord) -> None:
        data = asdict(record) | {
            "flags": masked(record.flags),
            "last_good_flags": masked(record.last_good_flags) if record.last_good_flags is not None else None,
            "spec": record.spec | {"flags": masked(record.spec.get("flags") or {})},
        }
        atomic_write_text(self.path(record.session, record.name), json.dumps(data, indent=2), mode=0o600)

    def load(self, session: str, name: str) -> RunRecord | None:
        try:
            return RunRecord.from_dict(json.loads(self.path(session, name).read_text()))
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def remove(self, session: str, name: str) -> None:
        self.path(session, name).unlink(missing_ok=True)

    # -- what outlives a run, one JSON file per instance in a subfolder: outcomes/, operations/ -------
    def _kept_path(self, kind: str, session: str, name: str) -> Path:
        folder = self.folder / kind
        folder.mkdir(exist_ok=True, mode=0o700)
        return folder / f"{_safe(session)}.{_safe(name)}.json"

    def _keep(self, kind: str, session: str, name: str, data: dict[str, Any]) -> None:
        atomic_write_text(self._kept_path(kind, session, name), json.dumps(data, indent=2), mode=0o600)

    def _kept(self, kind: str, session: str, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self._kept_path(kind, session, name).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def outcome_path(self, session: str, name: str) -> Path:
        return self._kept_path("outcomes", session, name)

    def save_outcome(self, outcome: Outcome) -> None:
        self._keep(
            "outcomes", outcome.session, outcome.name, asdict(outcome) | {"flags": masked(outcome.flags)}
        )

    def load_outcome(self, session: str, name: str) -> Outcome | None:
        data = self._kept("outcomes", session, name)
        try:
            return Outcome.from_dict(data) if data is not None else None
        except (TypeError, KeyError):
            return None

    def clear_outcome(self, session: str, name: str) -> None:
        self.outcome_path(session, name).unlink(missing_ok=True)

    def save_operation(self, op: PendingOperation) -> None:
        data = asdict(op) | {"flags": masked(op.flags), "before": masked(op.before)}
        self._keep("operations", op.session, op.name, data)

    def load_operation(self, session: str, name: str) -> PendingOperation | None:
        data = self._kept("operations", session, name)
        try:
            return PendingOperation.from_dict(data) if data is not None else None
        except (TypeError, KeyError):
            return None

    def clear_operation(self, session: str, name: str) -> None:
        self._kept_path("operations", session, name).unlink(missing_ok=True)

    def all(self, session: str | None = None) -> list[RunRecord]:
        sweep_stale_temps(self.folder)  # what interrupted saves of records left
        records = []
        for file in sorted(self.folder.glob("*.json")):
            try:
                record = RunRecord.from_dict(json.loads(file.read_text()))
            except (OSError, ValueError, TypeError, KeyError):
                continue
            if session is None or record.session == session:
                records.append(record)
        return records

    def update(self, session: str, name: str, **changes: Any) -> RunRecord | None:
        record = self.load(session, name)
        if record is None:
            return None
        for key, value in changes.items():
            setattr(record, key, value)
        self.save(record)
        return record
