"""A tune's progress file: what a running (or ended) tune has done so far, written atomically after
every step by the tune process and read by the dashboard's tune screen and by `vtui tune --resume`.

One file per instance (`progress_path(session, name)`); it names the tune process (pid + create time,
so a recycled pid is never taken for it), the original flags (put back on abort), the settings, the
trial in progress and every trial with its measurements. A file that says "running" while its process
is gone is a tune that was killed: `live_state` says "interrupted", and `--resume` replays its recorded
measurements (`ReplayRunner`: the same search takes the same path without a restart) and goes on live
from where it stopped."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vtui.tune.search import Measurement, Objective, StartFailed, Trial, TrialRunner, meets_slo
from vtui.tune.space import Config

KIND = "vtui-tune-progress"
FAILED_PREFIX = "failed to start: "
LIVE = "running"
ENDED = ("done", "aborted", "failed")


def progress_path(session: str, name: str) -> Path:
    from vtui.core.paths import state_dir

    return state_dir() / "tune" / f"{session}.{name}.progress.json"


def log_path(session: str, name: str) -> Path:
    """Where a detached tune's own output goes."""
    return progress_path(session, name).with_name(f"{session}.{name}.log")


def read(path: Path) -> dict[str, Any] | None:
    """The progress document, or None when there is none (or it is not one)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("kind") == KIND else None


def write(path: Path, doc: Mapping[str, Any]) -> None:
    from vtui.core.atomic import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(dict(doc), indent=1, default=str) + "\n", 0o600)


def process_started(pid: int) -> float | None:
    """The create time of process `pid` (None: no such process, or one that has ended: a zombie)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(proc.create_time())
    except (psutil.Error, ValueError):
        return None


def own_identity() -> tuple[int, float | None]:
    return os.getpid(), process_started(os.getpid())


def tune_alive(doc: Mapping[str, Any]) -> bool:
    """The process the document names is still the tune that wrote it (pid and create time agree)."""
    pid, started = doc.get("pid"), doc.get("pid_started")
    if not isinstance(pid, int) or pid <= 0:
        return False
    now = process_started(pid)
    return now is not None and (not isinstance(started, (int, float)) or abs(now - started) < 1.0)


def live_state(doc: Mapping[str, Any] | None) -> str | None:
    """running, interrupted (its process died), done, aborted, failed; None: no tune recorded."""
    if doc is None:
        return None
    state = str(doc.get("state"))
    if state == LIVE and not tune_alive(doc):
        return "interrupted"
    return state


def abort(doc: Mapping[str, Any]) -> bool:
    """Ask the tune the document names to stop (SIGTERM: it puts the original flags back, then exits).
    False when no such tune runs."""
    if live_state(doc) != LIVE or doc.get("job") == "supervisor":
        return False  # a supervisor's job: its pid is the supervisor's (`vtui tune NAME --cancel`)
    try:
        os.kill(int(doc["pid"]), signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    return True


# -- trials as JSON (the report, --json and the progress file share this) -------------------------------
def measurement_json(m: Measurement) -> dict[str, object]:
    return m.to_json()


def measurement_from_json(doc: Mapping[str, Any]) -> Measurement:
    return Measurement(
        req_per_s=float(doc["req_per_s"]),
        output_tok_per_s=float(doc["output_tok_per_s"]),
        ttft_p95_ms=_opt(doc.get("ttft_p95_ms")),
        itl_p95_ms=_opt(doc.get("itl_p95_ms")),
        requests=int(doc["requests"]),
        failed=int(doc["failed"]),
        kv_peak=_opt(doc.get("kv_peak")),
        waiting_peak=_opt(doc.get("waiting_peak")),
        preemptions=_opt(doc.get("preemptions")),
    )


def trial_json(trial: Trial, start: Config, objective: Objective) -> dict[str, Any]:
    """One trial: what changed from the start, whether it was launched or scored from the plan, the
    planner's prediction beside the measured result (merged over its runs; `runs`: each one)."""
    runs = [trial.measurement, *trial.repeats] if trial.measurement is not None else []
    return {
        "index": trial.index,
        "stage": trial.stage,
        "changed": trial.config.changed(start),
        "flags": trial.config.flags,
        "launched": trial.launched,
        "scored_from": "measurement" if trial.measurement is not None else "plan",
        "prediction": trial.prediction.to_json() if trial.prediction else None,
        "measurement": trial.result.to_json() if trial.result else None,
        "measurements": len(runs),
        "runs": [m.to_json() for m in runs if m is not None],
        "spread": spread.to_json() if (spread := trial.spread(objective)) is not None else None,
        "infeasible": trial.infeasible,
        "diagnosis": list(trial.diagnosis),
        "meets_slo": meets_slo(trial.result, objective),
    }


# -- resuming -------------------------------------------------------------------------------------------
Outcome = Measurement | StartFailed


def recorded_outcomes(trials: list[Mapping[str, Any]]) -> dict[Config, deque[Outcome]]:
    """What each launched trial of a recorded tune gave, in the order it was measured: its runs, or the
    failure to start with its diagnosis."""
    out: dict[Config, deque[Outcome]] = {}
    for t in trials:
        if not t.get("launched"):
            continue
        config = Config.of(t["flags"])
        queue = out.setdefault(config, deque())
        runs = t.get("runs") or []
        if runs:
            queue.extend(measurement_from_json(r) for r in runs)
        elif str(t.get("infeasible") or "").startswith(FAILED_PREFIX):
            message = str(t["infeasible"])[len(FAILED_PREFIX) :]
            queue.append(StartFailed(message, t.get("diagnosis") or ()))
    return out


class ReplayRunner:
    """A runner that answers from a recorded tune first (no restart, no load) and from `live` once the
    record has nothing for the configuration asked. The search is deterministic, so given the same
    answers it walks the same trials again and carries on where the recorded tune stopped."""

    def __init__(self, live: TrialRunner, recorded: dict[Config, deque[Outcome]], restarts: int = 0) -> None:
        self.live = live
        self.recorded = recorded
        self.base_restarts = restarts
        self.replayed = 0

    @property
    def restarts(self) -> int:
        return self.base_restarts + self.live.restarts

    def measure(self, config: Config) -> Measurement:
        queue = self.recorded.get(config)
        if queue:
            outcome = queue.popleft()
            self.replayed += 1
            if isinstance(outcome, StartFailed):
                raise outcome
            return outcome
        return self.live.measure(config)


def new_doc(
    *,
    session: str,
    instance: str,
    layout: str | None,
    options: Mapping[str, Any],
    original: Mapping[str, object],
    start: Config,
    objective: Objective,
    resolved: Mapping[str, Any],
) -> dict[str, Any]:
    pid, started = own_identity()
    now = time.time()
    return {
        "kind": KIND,
        "session": session,
        "instance": instance,
        "layout": layout,
        "pid": pid,
        "pid_started": started,
        "state": LIVE,
        "message": None,
        "started_at": now,
        "updated_at": now,
        "options": dict(options),
        "resolved": dict(resolved),  # concurrency, context, calibration: the same on a resume
        "objective": {
            "ttft_p95_ms": objective.ttft_p95_ms,
            "itl_p95_ms": objective.itl_p95_ms,
            "metric": objective.metric,
        },
        "original": dict(original),
        "start": start.flags,
        "current": None,
        "trials": [],
        "restarts": 0,
        "replayed": 0,
        "baseline": None,
        "best": None,
        "report": None,
    }


def _opt(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]
