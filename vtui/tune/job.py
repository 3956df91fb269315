"""A tune as a job of the session supervisor: it runs there (`service.tuning`, in a worker thread), not
in the client that asked for it, so it survives the client (`vtui tune` only starts it, follows it on
the feed, and may leave: Ctrl-C or a dropped SSH connection does not stop it).

The client sends a `plan` (`plan_json`: everything it resolved from the instance and the command line:
the space, the starting flags, the SLOs, the load); the job rebuilds the search from it, measures each
configuration through `InstanceOps` (every trial a restart through the instance's operation queue,
label "tune trial", with fallback: a configuration that does not reach READY is recorded with its
diagnosis and the instance goes back to the flags before), and writes its progress (the file the tune
screen and `--resume` read) and publishes it (the feed) after every step.

At the end the best runs if the noise rule says it beats the baseline; otherwise, and on cancel or an
error, the original flags are put back (`restore`, label "tune restore"): tried RESTORE_TRIES times,
then the last flags that reached READY, then a plain start, so an instance the user did not stop is
never left stopped. One the user stopped during the tune stays stopped."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from vtui.bench import BenchConfig
from vtui.telemetry.flagsave import FlagSave
from vtui.tune import progress
from vtui.tune.report import render_table, summary, write_report
from vtui.tune.runner import (
    InstanceOps,
    InstanceStopped,
    TrialRunner,
    TuneCancelled,
    model_config,
    planner_predictor,
)
from vtui.tune.search import Objective, Search, Trial
from vtui.tune.space import Config, Space

RESTORE_TRIES = 3  # attempts at the original flags before the last flags that reached READY
RESTORE_BACKOFF_S = 2.0  # × the attempt number between two attempts
PLAN_KEYS = frozenset(
    {
        "original",
        "start",
        "space",
        "defaults",
        "objective",
        "bench",
        "warmup",
        "max_trials",
        "workload_tokens",
    }
)


class JobOps(InstanceOps, Protocol):
    """What the job needs beyond a trial's restarts, for its restore."""

    def last_good(self) -> dict[str, object] | None:
        """The flags that last reached READY (secrets left out), None when none did."""
        ...

    def start(self) -> None:
        """Start the instance as it is (its last resort: never left stopped by the tune)."""
        ...


def plan_problem(plan: Mapping[str, Any]) -> str | None:
    """What is missing from a plan, or None."""
    missing = sorted(PLAN_KEYS - set(plan))
    if missing:
        return f"missing {', '.join(missing)}"
    for key in ("original", "start", "defaults", "objective", "bench", "space"):
        if not isinstance(plan[key], dict):
            return f"{key}: expected an object"
    if not isinstance(plan["space"].get("values"), dict):
        return "space.values: expected an object"
    return None


def plan_json(
    *,
    original: Mapping[str, object],
    start: Config,
    space: Space,
    defaults: Mapping[str, object],
    objective: Objective,
    bench: Mapping[str, object],
    warmup: int,
    max_trials: int,
    workload_tokens: int,
    model: Mapping[str, object],
    options: Mapping[str, object],
    resolved: Mapping[str, object],
    layout: str | None,
    resume: Mapping[str, Any] | None = None,
    min_runs: int | None = None,
    save: bool = False,
) -> dict[str, Any]:
    """The plan a client sends with `POST /tune`: JSON only. `save`: when the best is applied, the
    supervisor writes it into its layout file (`--save`: it need not wait for a client following)."""
    return {
        "original": dict(original),
        "start": start.flags,
        "space": {
            "values": {k: list(v) for k, v in space.values.items()},
            "required_context": space.required_context,
            "fixed": dict(space.fixed),
        },
        "defaults": dict(defaults),
        "objective": {
            "ttft_p95_ms": objective.ttft_p95_ms,
            "itl_p95_ms": objective.itl_p95_ms,
            "metric": objective.metric,
        },
        "bench": dict(bench),
        "warmup": warmup,
        "max_trials": max_trials,
        "min_runs": min_runs,
        "workload_tokens": workload_tokens,
        "model": dict(model),
        "options": dict(options),
        "resolved": dict(resolved),
        "layout": layout,
        "resume": dict(resume) if resume else None,
        "save": save,
    }


class TuneJob:
    """One tune of one instance. `run()` (in a worker thread) returns the final progress document;
    `cancel()` (any thread) makes it stop at the next restart or bench step and restore."""

    def __init__(
        self,
        ops: JobOps,
        plan: Mapping[str, Any],
        *,
        session: str,
        instance: str,
        base_url: str,
        api_key: str | None = None,
        publish: Callable[[dict[str, Any]], None] = lambda doc: None,
        write_progress: bool = True,
        sleep: Callable[[float], None] = time.sleep,
        engine: str | None = None,
        model: str | None = None,
        save_flags: Callable[[Mapping[str, object]], FlagSave] | None = None,
    ) -> None:
        """`save_flags`: writes applied flags into the layout (`telemetry.flagsave`), when the plan asks."""
        self.ops = ops
        self.save_flags = save_flags if plan.get("save") else None
        self.plan = dict(plan)
        self.session, self.name = session, instance
        self.publish = publish
        self.write_progress = write_progress
        self.sleep = sleep
        self.engine, self.model = engine, model
        self._cancel = threading.Event()
        self.original = dict(plan["original"])
        space = plan["space"]
        self.space = Space(
            {k: tuple(v) for k, v in space["values"].items()},
            int(space.get("required_context") or 0),
            dict(space.get("fixed") or {}),
        )
        self.start = Config.of(plan["start"])
        o = plan["objective"]
        self.objective = Objective(o.get("ttft_p95_ms"), o.get("itl_p95_ms"), o.get("metric") or "rps")
        fields = set(BenchConfig.__dataclass_fields__)
        bench = {k: v for k, v in plan["bench"].items() if k in fields}
        self.bench = BenchConfig(base_url=base_url, api_key=api_key, scrape_interval_s=0.2, **bench)
        self.runner = TrialRunner(
            ops,
            self.bench,
            defaults=plan["defaults"],
            warmup_requests=int(plan["warmup"]),
            cancelled=self._cancel.is_set,
        )
        self.progress_file = progress.progress_path(session, instance)
        self.doc: dict[str, Any] = self._new_doc()
        self.snapshot: dict[str, Any] = _frozen(self.doc)  # the last published copy: any thread reads it

    # -- control ---------------------------------------------------------------------------------------
    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def live(self) -> bool:
        return self.snapshot.get("state") == progress.LIVE

    # -- progress --------------------------------------------------------------------------------------
    def _new_doc(self) -> dict[str, Any]:
        plan = self.plan
        doc = progress.new_doc(
            session=self.session,
            instance=self.name,
            layout=plan.get("layout"),
            options=plan.get("options") or {},
            original=self.original,
            start=self.start,
            objective=self.objective,
            resolved=plan.get("resolved") or {},
        )
        doc["job"] = "supervisor"  # the pid is the session supervisor's: cancel through its socket
        doc["plan"] = plan
        resume = plan.get("resume") or {}
        if resume:
            doc["started_at"] = resume.get("started_at", doc["started_at"])
            doc["resumed"] = int(resume.get("resumed") or 0) + 1
        return doc

    def save(self, **changes: Any) -> None:
        replayed = getattr(self._search_runner, "replayed", 0) if hasattr(self, "_search_runner") else 0
        self.doc.update(changes, updated_at=time.time(), restarts=self.runner.restarts, replayed=replayed)
        if self.write_progress:
            try:
                progress.write(self.progress_file, self.doc)
            except OSError:  # the tune goes on; the feed still carries its progress
                pass
        self.snapshot = _frozen(self.doc)
        self.publish(self.snapshot)

    def _current(self, stage: str, phase: str, changed: Mapping[str, object], index: int | None) -> None:
        self.save(
            current={
                "index": index,
                "stage": stage,
                "changed": dict(changed),
                "phase": phase,
                "since": time.time(),
            }
        )

    # -- the tune --------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        resume = self.plan.get("resume") or {}
        runner = progress.ReplayRunner(
            self.runner,
            progress.recorded_outcomes(resume.get("trials") or []),
            int(resume.get("restarts") or 0),
        )
        self._search_runner = runner
        m = self.plan.get("model") or {}
        cfg = model_config(str(m.get("engine") or "vllm"), str(m.get("model")), m.get("sim_params"))
        predictor = planner_predictor(
            cfg,
            m.get("gpu_gib"),
            int(self.plan["workload_tokens"]),
            calibration=float(m.get("calibration") or 1.0),
        )

        def on_trial(trial: Trial) -> None:
            self.save(
                trials=[*self.doc["trials"], progress.trial_json(trial, self.start, self.objective)],
                current=None,
            )

        def on_start(config: Config, stage: str, index: int) -> None:
            self._current(stage, "starting", config.changed(self.start), index)

        def on_phase(phase: str) -> None:
            if self.doc.get("current"):
                self.save(current={**self.doc["current"], "phase": phase})

        self.runner.on_phase = on_phase
        kw: dict[str, Any] = {}
        if self.plan.get("min_runs"):
            kw["min_runs"] = int(self.plan["min_runs"])
        search = Search(
            self.space,
            self.start,
            runner,
            self.objective,
            predictor,
            max_trials=int(self.plan["max_trials"]),
            workload_tokens=int(self.plan["workload_tokens"]),
            on_trial=on_trial,
            on_start=on_start,
            **kw,
        )
        self.save()
        try:
            result = search.run()
            trials = [progress.trial_json(t, self.start, self.objective) for t in result.trials]
            self.save(trials=trials)
            if result.apply:
                self._current(
                    "apply", "applying the best flags", result.best.config.changed(self.start), None
                )
                self.runner.apply(result.best.config.flags, label="tune trial")
                restored = None
            else:
                self._current(
                    "restore", "the best is within noise: putting the original flags back", {}, None
                )
                restored = self.restore()
            result.restarts = runner.restarts
        except InstanceStopped as exc:
            return self._end("aborted", f"{self.name} was stopped during the tune ({exc}): left stopped")
        except BaseException as exc:  # cancel, a failed start of the final flags, anything: restore
            why = "cancelled" if isinstance(exc, TuneCancelled) else f"{type(exc).__name__}: {exc}"
            self._current("abort", "putting the original flags back", {}, None)
            try:
                restored = self.restore()
            except InstanceStopped as stopped:
                restored = f"stopped during the restore ({stopped}): left stopped"
            state = "aborted" if isinstance(exc, TuneCancelled) else "failed"
            self._end(state, f"{why}; {restored}")
            if isinstance(exc, Exception):
                return self.doc
            raise
        return self._finish(result, restored)

    def _finish(self, result: Any, restored: str | None) -> dict[str, Any]:
        effective = self.runner.effective
        final_flags, _ = self.ops.running()
        report: dict[str, Any] = {
            "instance": self.name,
            "baseline": summary(result.baseline, self.objective, effective),
            "trials": [progress.trial_json(t, self.start, self.objective) for t in result.trials],
            "best": summary(result.best, self.objective, effective),
            "restarts": result.restarts,
            "launched": result.launched,
            "replayed": getattr(self._search_runner, "replayed", 0),
            "stopped": result.stopped,
            "objective": self.doc["objective"],
            "applied": result.apply,
            "verdict": result.verdict,
            "difference": result.difference.to_json() if result.difference else None,
            "restored": restored,
            "final_flags": final_flags,
        }
        if self.save_flags is not None:  # before "done" is published: a following client reads it there
            outcome = self.save_flags(final_flags) if result.apply else None
            report["saved_to"] = str(outcome.saved) if outcome and outcome.saved else None
            report["save_problems"] = list(outcome.problems) if outcome else []
        try:
            write_report(
                report,
                self.runner.results.get(result.best.config) if result.apply else None,
                name=self.name,
                final_flags=final_flags,
                model=self.model,
                engine=self.engine,
            )
        except OSError as exc:
            report["report_error"] = str(exc)
        message = result.verdict + (f" ({result.stopped})" if result.stopped else "")
        if restored is not None and not restored.startswith("original flags"):
            message += f"; {restored}"
        self.save(
            state="done",
            current=None,
            baseline=report["baseline"],
            best=report["best"],
            report=report.get("report"),
            trials=report["trials"],
            message=message,
            result=report,
            table=render_table(report),
        )
        return self.doc

    def _end(self, state: str, message: str) -> dict[str, Any]:
        self.save(state=state, message=message, current=None, final_flags=self.ops.running()[0])
        return self.doc

    # -- the restore ---------------------------------------------------------------------------------
    def restore(self) -> str:
        """Put the original flags back: RESTORE_TRIES attempts (each a restart through the queue, with
        fallback), then the last flags that reached READY, then a plain start: never left stopped.
        InstanceStopped when someone stopped it (it stays stopped). Returns what was done."""
        errors: list[str] = []
        for attempt in range(1, RESTORE_TRIES + 1):
            try:
                self.runner.apply(self.original, exact=True, label="tune restore")
                return "original flags restored" + (
                    f" (attempt {attempt}; before: {'; '.join(errors)})" if errors else ""
                )
            except InstanceStopped:
                raise
            except Exception as exc:  # noqa: BLE001 — each attempt's failure is reported
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                self.save(restore_errors=list(errors))
                if attempt < RESTORE_TRIES:
                    self.sleep(RESTORE_BACKOFF_S * attempt)
        good = self.ops.last_good()
        if good is not None:
            try:
                self.runner.apply(good, exact=True, label="tune restore")
                return (
                    f"could not restore the original flags ({'; '.join(errors)}); running the last flags "
                    f"that reached READY instead"
                )
            except InstanceStopped:
                raise
            except Exception as exc:  # noqa: BLE001 — reported, then the last resort below
                errors.append(f"last good flags: {type(exc).__name__}: {exc}"[:300])
        _, state = self.ops.running()
        if state not in ("ready", "starting"):
            self.ops.start()
        return f"could not restore the original flags ({'; '.join(errors)}); started it as it was"


def _frozen(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON copy (the job's thread goes on changing the original)."""
    frozen: dict[str, Any] = json.loads(json.dumps(doc, default=str))
    return frozen
