"""`vtui tune [LAYOUT] NAME`: find the flags that give the most goodput under the SLOs for this box and
this workload, unattended: a structured search in the seeds' order (vtui.tune), each trial a restart
through the session supervisor, a warm-up and one bench step. The planner rules out what cannot work
before a restart is spent; a start that fails is recorded with its diagnosis. Ctrl-C or an error puts the
original flags back; at the end the best flags run (`--save`: written into the layout, comments kept), a
baseline is saved with their bench result, and a report (JSON + table) goes to the state dir."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from vtui.commands._input import Value, bounded
from vtui.commands._tune_control import abort_on_signals, detach, options_of, restore, restore_only, tune_lock
from vtui.commands._tune_output import dry_run, fmt, print_dry, render_table, summary, write_outputs
from vtui.commands._tune_setup import TuneSetup, bench_config
from vtui.tune import progress

HELP = "find the best flags for a workload under TTFT/ITL SLOs (restarts the instance per trial)"
trial_json = progress.trial_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("words", nargs="+", metavar="[LAYOUT] NAME", help="layout file, then the instance")
    parser.add_argument("--ttft-p95-ms", type=bounded(0, above=True), action=Value, default=None)
    parser.add_argument("--itl-p95-ms", type=bounded(0, above=True), action=Value, default=None)
    parser.add_argument("--input-len", type=bounded(1, 10**7, integer=True), action=Value, default=256)
    parser.add_argument("--output-len", type=bounded(1, 10**7, integer=True), action=Value, default=64)
    load = parser.add_mutually_exclusive_group()
    load.add_argument(
        "--concurrency",
        type=bounded(1, 100_000, integer=True),
        action=Value,
        default=None,
        help="requests in flight (default: the instance's max concurrency from its startup log)",
    )
    load.add_argument("--request-rate", type=bounded(0, above=True), action=Value, default=None)
    parser.add_argument(
        "--context",
        type=bounded(1, 10**8, integer=True),
        action=Value,
        default=None,
        help="required context length: max-model-len never below it (default: the instance's)",
    )
    parser.add_argument(
        "--num-requests",
        type=bounded(1, 10**6, integer=True),
        action=Value,
        default=None,
        help="requests per bench step (default: 4 × the load, at least 32)",
    )
    parser.add_argument("--warmup", type=bounded(0, 10**6, integer=True), action=Value, default=4)
    parser.add_argument(
        "--objective", choices=("rps", "tok"), default="rps", help="goodput in requests/s or output tok/s"
    )
    parser.add_argument("--max-trials", type=bounded(1, 10_000, integer=True), action=Value, default=24)
    parser.add_argument(
        "--fix", action="append", default=[], metavar="FLAG=VALUE", help="keep a flag at this value"
    )
    parser.add_argument(
        "--allow-quality-trade", action="store_true", help="also try a smaller KV cache dtype (fp8)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan; restart nothing")
    parser.add_argument(
        "--detach",
        action="store_true",
        help="run the tune in the background, detached from the terminal (it survives the dashboard "
        "closing and an SSH drop); follow it in the dashboard (T) or its progress file",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the instance's last tune (stopped, killed or aborted) from its recorded trials, "
        "with its settings",
    )
    parser.add_argument(
        "--restore",
        action="store_true",
        help="put back the original flags of an interrupted tune (its process was killed) and stop there",
    )
    parser.add_argument("--save", action="store_true", help="write the best flags into the layout file")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    import os

    from vtui.commands._runs import CommandError, ServiceError, ServiceUnavailable, print_json

    try:
        setup = TuneSetup(args)
    except CommandError as exc:
        return exc.code
    except (ValueError, KeyError) as exc:
        print(f"vtui tune: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        doc = dry_run(setup)
        print_json(doc) if args.json else print_dry(doc)
        return 0
    if args.restore:
        return restore_only(setup, args)
    if args.detach:
        return detach(setup, args)
    from vtui.tune import Search, StartFailed
    from vtui.tune.runner import SupervisorRunner

    lock = tune_lock(setup)
    if lock is None:
        print(f"vtui tune: a tune of {setup.name} is running already", file=sys.stderr)
        return 2
    abort_on_signals(detached=os.getsid(0) == os.getpid())
    live = SupervisorRunner(
        setup.session.client,
        setup.name,
        bench_config(setup, args),
        defaults=setup.defaults,
        warmup_requests=args.warmup,
    )
    recorded = setup.resume or {}
    runner = progress.ReplayRunner(
        live, progress.recorded_outcomes(recorded.get("trials") or []), int(recorded.get("restarts") or 0)
    )
    state = progress.new_doc(
        session=setup.session.name,
        instance=setup.name,
        layout=setup.layout_path,
        options=options_of(args),
        original=setup.original,
        start=setup.start,
        objective=setup.objective,
        resolved={
            "concurrency": setup.concurrency,
            "context": setup.context,
            "calibration": setup.calibration,
        },
    )
    if setup.resume:
        state["started_at"] = recorded.get("started_at", state["started_at"])
        state["resumed"] = int(recorded.get("resumed") or 0) + 1

    def save(**changes: Any) -> None:
        state.update(changes, updated_at=time.time(), restarts=runner.restarts, replayed=runner.replayed)
        try:
            progress.write(setup.progress_file, state)
        except OSError as exc:  # the tune goes on; the screen shows the last file
            print(f"vtui tune: could not write {setup.progress_file}: {exc}", file=sys.stderr)

    def starting(config, stage: str, index: int) -> None:
        save(
            current={
                "index": index,
                "stage": stage,
                "changed": config.changed(setup.start),
                "phase": "starting",
                "since": time.time(),
            }
        )

    def phase(name: str) -> None:
        if state.get("current"):
            save(current={**state["current"], "phase": name})

    def progress_line(trial) -> None:
        save(
            trials=[*state["trials"], trial_json(trial, setup.start, setup.objective)],
            current=None,
        )
        if args.json:
            return
        m = trial.result
        what = f"{m.req_per_s:.2f} req/s, TTFT p95 {fmt(m.ttft_p95_ms, '.0f')} ms" if m else trial.infeasible
        change = ", ".join(f"{k}={v}" for k, v in trial.config.changed(setup.start).items()) or "start"
        print(f"trial {trial.index} [{trial.stage}] {change}: {what}", file=sys.stderr, flush=True)

    live.on_phase = phase
    save()
    search = Search(
        setup.space,
        setup.start,
        runner,
        setup.objective,
        setup.predictor,
        max_trials=args.max_trials,
        workload_tokens=setup.workload_tokens,
        on_trial=progress_line,
        on_start=starting,
    )
    try:
        result = search.run()
        save(
            trials=[trial_json(t, setup.start, setup.objective) for t in result.trials],
            current={
                "index": None,
                "stage": "apply",
                "changed": result.best.config.changed(setup.start),
                "phase": "applying the best flags",
                "since": time.time(),
            },
        )
        if result.best.config == setup.start:
            live.apply(setup.original, exact=True)
        else:
            live.apply(result.best.config.flags)
        result.restarts = runner.restarts  # the final apply included
    except BaseException as exc:  # Ctrl-C, SIGTERM, a failed start of the final flags, the supervisor gone
        save(
            current={
                "index": None,
                "stage": "abort",
                "changed": {},
                "phase": "putting the original flags back",
                "since": time.time(),
            }
        )
        restored = restore(live, setup, exc)
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        save(
            state="aborted" if isinstance(exc, KeyboardInterrupt) else "failed",
            message=why
            + ("; original flags restored" if restored else "; could not restore the original flags"),
            current=None,
        )
        if isinstance(exc, KeyboardInterrupt):
            return 130
        if isinstance(exc, (StartFailed, ServiceError, ServiceUnavailable, OSError, RuntimeError)):
            return 1
        raise
    effective = live.effective
    doc = {
        "instance": setup.name,
        "baseline": summary(result.baseline, setup, effective),
        "trials": [trial_json(t, setup.start, setup.objective) for t in result.trials],
        "best": summary(result.best, setup, effective),
        "restarts": result.restarts,
        "launched": result.launched,
        "replayed": runner.replayed,
        "stopped": result.stopped,
        "objective": {
            "ttft_p95_ms": args.ttft_p95_ms,
            "itl_p95_ms": args.itl_p95_ms,
            "metric": args.objective,
        },
    }
    code = write_outputs(doc, result, live, setup, args)
    save(
        state="done",
        current=None,
        baseline=doc["baseline"],
        best=doc["best"],
        report=doc.get("report"),
        trials=doc["trials"],
        message=result.stopped,
    )
    print_json(doc) if args.json else print(render_table(doc))
    return code
