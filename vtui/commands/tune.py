"""`vtui tune [LAYOUT] NAME`: find the flags that give the most goodput under the SLOs for this box and
this workload, unattended: a structured search in the seeds' order (vtui.tune), each trial a restart
through the session supervisor, a warm-up and one bench step. The planner rules out what cannot work
before a restart is spent; a start that fails is recorded with its diagnosis. Ctrl-C or an error puts the
original flags back; at the end the best flags run (`--save`: written into the layout, comments kept), a
baseline is saved with their bench result, and a report (JSON + table) goes to the state dir."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from vtui.commands._input import Value, bounded
from vtui.tune import progress

HELP = "find the best flags for a workload under TTFT/ITL SLOs (restarts the instance per trial)"
DEFAULT_LOAD_CAP = 256  # the starting load is the instance's max concurrency, at most this
# what a resume does not take from the recorded tune
NOT_RESUMED = {"words", "json", "save", "detach", "resume", "restore", "dry_run", "func", "command"}
# (dest, option) of the settings a detached tune is started with (its command line rebuilt)
VALUE_OPTIONS = (
    ("ttft_p95_ms", "--ttft-p95-ms"),
    ("itl_p95_ms", "--itl-p95-ms"),
    ("input_len", "--input-len"),
    ("output_len", "--output-len"),
    ("concurrency", "--concurrency"),
    ("request_rate", "--request-rate"),
    ("context", "--context"),
    ("num_requests", "--num-requests"),
    ("warmup", "--warmup"),
    ("objective", "--objective"),
    ("max_trials", "--max-trials"),
)
SWITCHES = (("allow_quality_trade", "--allow-quality-trade"), ("save", "--save"), ("resume", "--resume"))


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


class _Setup:
    """Everything a tune needs, gathered from the supervisor's view of the instance (on `--resume`:
    the original flags, the settings and the resolved load from the recorded tune)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from vtui.commands._runs import base_url_of, connect
        from vtui.commands.restart import parse_sets
        from vtui.core import vllm_memory
        from vtui.planner import flag_default
        from vtui.tune import Objective, build_space, start_config
        from vtui.tune.runner import model_config, planner_predictor, running_flags

        try:
            fixed = parse_sets(args.fix)
        except ValueError as exc:
            raise ValueError(str(exc).replace("--set", "--fix", 1)) from None
        self.session = connect(args.words, command="tune")
        if len(self.session.names) != 1:
            raise ValueError("name exactly one instance")
        self.name = self.session.names[0]
        self.progress_file = progress.progress_path(self.session.name, self.name)
        self.previous = progress.read(self.progress_file)
        self.resume = self._resumed(args)
        status = self.session.status()
        inst = next(i for i in status["instances"] if i["name"] == self.name)
        if inst["state"] != "ready" and not (self.resume or args.restore):
            raise ValueError(f"{self.name} is {inst['state']}: start it first (`vtui up`), then tune it")
        self.layout_path = status.get("layout_path")
        spec = inst["spec"]
        self.engine, self.model = spec.get("engine"), spec.get("model")
        facts = inst.get("facts") or {}
        recorded = self.resume or (self.previous if args.restore else None)  # the tune to go on with / undo
        resolved = (recorded or {}).get("resolved") or {}
        self.original = (
            dict(recorded["original"]) if recorded else running_flags(self.session.client, self.name)
        )
        self.base_url = base_url_of(spec)
        gpu_gib = self._gpu_gib(spec, self.original)
        device = "cuda"
        model_max = facts.get("max_model_len")
        self.defaults: dict[str, Any] = {
            "max-num-seqs": vllm_memory.default_max_num_seqs(gpu_gib, device),
            "max-num-batched-tokens": vllm_memory.default_max_num_batched_tokens(gpu_gib, device),
            "gpu-memory-utilization": flag_default("gpu-memory-utilization"),
            "enable-chunked-prefill": True,
            "enable-prefix-caching": True,
        }
        if model_max:
            self.defaults["max-model-len"] = int(model_max)
        running_len = self.original.get("max-model-len") or model_max
        context = (
            resolved.get("context")
            or args.context
            or (int(running_len) if isinstance(running_len, int) else None)
        )
        if context is None:
            raise ValueError("give --context N: the instance's context length is not known yet")
        max_conc = facts.get("max_concurrency")
        self.context = int(context)
        self.concurrency = (
            resolved.get("concurrency")
            or args.concurrency
            or (max(1, min(DEFAULT_LOAD_CAP, int(max_conc))) if max_conc else 32)
        )
        self.workload_tokens = args.input_len + args.output_len
        self.space = build_space(
            self.original,
            required_context=context,
            model_max_len=int(model_max) if model_max else None,
            concurrency=self.concurrency,
            allow_quality_trade=args.allow_quality_trade,
            fixed=fixed,  # type: ignore[arg-type]
            default_max_num_seqs=self.defaults["max-num-seqs"],
            default_max_num_batched_tokens=self.defaults["max-num-batched-tokens"],
        )
        self.start = start_config(self.original, self.space, self.defaults)
        self.objective = Objective(args.ttft_p95_ms, args.itl_p95_ms, args.objective)
        cfg = model_config(self.engine or "vllm", str(self.model), _str(self.original.get("sim-params")))
        base = planner_predictor(cfg, gpu_gib, self.workload_tokens)
        logged, planned = facts.get("kv_cache_tokens"), base(self.start).kv_cache_tokens
        calibration = resolved.get("calibration") or (logged / planned if logged and planned else 1.0)
        self.calibration = float(calibration)
        self.predictor = planner_predictor(cfg, gpu_gib, self.workload_tokens, calibration=calibration)
        self.gpus = len(spec.get("gpus") or []) or 1
        self.gpu_hour_price = None
        try:
            from vtui.layouts import load_layout

            self.gpu_hour_price = (
                load_layout(self.layout_path).session.gpu_hour_price if self.layout_path else None
            )
        except Exception:  # the report goes without a price; the tune does not need the file
            self.gpu_hour_price = None

    def _resumed(self, args: argparse.Namespace) -> dict[str, Any] | None:
        """The recorded tune `--resume` continues (its settings replace the command line's but --json,
        --save and --detach), after the checks; None without --resume."""
        state = progress.live_state(self.previous)
        if state == progress.LIVE:
            raise ValueError(
                f"a tune of {self.name} is running (pid {self.previous['pid']}); "  # type: ignore[index]
                f"abort it first (T in the dashboard, or kill -TERM {self.previous['pid']})"  # type: ignore[index]
            )
        if args.restore:
            if state != "interrupted":
                raise ValueError(f"no interrupted tune of {self.name} to restore (last: {state or 'none'})")
            return None
        if not args.resume:
            if state == "interrupted" and not args.dry_run:
                raise ValueError(
                    f"the last tune of {self.name} was interrupted (its process died) and may have left "
                    f"trial flags running: `--resume` it, or `--restore` its original flags first"
                )
            return None
        if self.previous is None or state == "done":
            raise ValueError(f"no unfinished tune of {self.name} to resume (last: {state or 'none'})")
        for key, value in (self.previous.get("options") or {}).items():
            if key not in NOT_RESUMED and hasattr(args, key):
                setattr(args, key, value)
        return self.previous

    def _gpu_gib(self, spec: dict[str, Any], flags: dict[str, object]) -> float | None:
        sim = flags.get("sim-gpu-memory-gib")
        if isinstance(sim, (int, float)) and not isinstance(sim, bool):
            return float(sim)
        try:
            from vtui.layouts import load_layout

            session_gib = load_layout(self.layout_path).session.gpu_memory_gib if self.layout_path else None
        except Exception:
            session_gib = None
        if session_gib:
            return float(session_gib)
        return 80.0 if spec.get("engine") == "sim" else _nvml_gib()


def _nvml_gib() -> float | None:
    from vtui.commands.plan import _nvml_gib as nvml

    return nvml()


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def bench_config(setup: _Setup, args: argparse.Namespace):
    from vtui.bench import BenchConfig

    load = setup.concurrency
    return BenchConfig(
        base_url=setup.base_url,
        mode="rate" if args.request_rate else "concurrency",
        concurrency=0 if args.request_rate else load,
        request_rate=args.request_rate,
        num_requests=args.num_requests or max(32, 4 * load),
        input_len=args.input_len,
        output_len=args.output_len,
        scrape_interval_s=0.2,
        api_key=_api_key(setup),
    )


def _api_key(setup: _Setup) -> str | None:
    """The instance's api-key from its layout (the supervisor shows it masked), else VLLM_API_KEY."""
    import os

    try:
        from vtui.layouts import load_layout

        key = (
            load_layout(setup.layout_path).instance(setup.name).flags.get("api-key")
            if setup.layout_path
            else None
        )
    except Exception:  # no usable layout file: the environment's key, if any
        key = None
    key = key[0] if isinstance(key, list) and key else key
    return str(key) if isinstance(key, str) and key else os.environ.get("VLLM_API_KEY")


# -- output -----------------------------------------------------------------------------------------
def _summary(trial, setup: _Setup, effective) -> dict[str, Any]:
    from vtui.tune import meets_slo

    m = trial.result
    return {
        "flags": effective(trial.config.flags),
        "goodput_rps": round(m.req_per_s, 4) if m else None,
        "output_tok_per_s": round(m.output_tok_per_s, 2) if m else None,
        "ttft_p95_ms": round(m.ttft_p95_ms, 2) if m and m.ttft_p95_ms is not None else None,
        "itl_p95_ms": round(m.itl_p95_ms, 2) if m and m.itl_p95_ms is not None else None,
        "meets_slo": meets_slo(m, setup.objective),
    }


trial_json = progress.trial_json


def render_table(doc: dict[str, Any]) -> str:
    head = f"{'#':>3} {'stage':<12}{'run':<6}{'req/s':>8}{'TTFT p95':>10}{'ITL p95':>9}{'KV':>6}{'pre':>5}  change"
    lines = [head]
    for t in doc["trials"]:
        m = t["measurement"] or {}
        change = ", ".join(f"{k}={v}" for k, v in t["changed"].items()) or "(starting flags)"
        note = t["infeasible"] or ""
        kv = m.get("kv_peak")
        lines.append(
            f"{t['index']:>3} {t['stage']:<12}{'yes' if t['launched'] else 'plan':<6}"
            f"{_f(m.get('req_per_s'), '.2f'):>8}{_f(m.get('ttft_p95_ms'), '.0f'):>10}"
            f"{_f(m.get('itl_p95_ms'), '.1f'):>9}{(f'{kv:.0%}' if kv is not None else '--'):>6}"
            f"{_f(m.get('preemptions'), 'g'):>5}  {change}{'  ✓' if t['meets_slo'] else ''}"
            + (f"  [{note}]" if note else "")
        )
    b, best = doc["baseline"], doc["best"]
    lines.append(
        f"baseline {_f(b['goodput_rps'], '.2f')} req/s, TTFT p95 {_f(b['ttft_p95_ms'], '.0f')} ms "
        f"({'meets' if b['meets_slo'] else 'misses'} the SLO)"
    )
    lines.append(
        f"best     {_f(best['goodput_rps'], '.2f')} req/s, TTFT p95 {_f(best['ttft_p95_ms'], '.0f')} ms "
        f"({'meets' if best['meets_slo'] else 'misses'} the SLO); {doc['restarts']} restarts"
    )
    return "\n".join(lines)


def _f(value: object, spec: str) -> str:
    return "--" if value is None else format(value, spec)


def dry_run(setup: _Setup) -> dict[str, Any]:
    """The plan: the space, and every configuration one flag away from the start with the planner's
    prediction and whether it would be launched or ruled out from the plan."""
    from vtui.tune import Search

    search = Search(setup.space, setup.start, _NoRunner(), setup.objective, setup.predictor)
    rows = []
    for dim in setup.space.dims():
        for value in setup.space.values[dim]:
            config = setup.start.with_(**{dim: value})
            if config == setup.start and dim != setup.space.dims()[0]:
                continue
            pred = setup.predictor(config)
            rows.append(
                {
                    "changed": config.changed(setup.start),
                    "prediction": pred.to_json(),
                    "launch": search.plan_problem(config, pred) is None,
                    "why_not": search.plan_problem(config, pred),
                }
            )
    return {
        "instance": setup.name,
        "start": setup.start.flags,
        "space": {k: list(v) for k, v in setup.space.values.items()},
        "space_size": setup.space.size(),
        "load": {"concurrency": setup.concurrency, "workload_tokens": setup.workload_tokens},
        "objective": {
            "ttft_p95_ms": setup.objective.ttft_p95_ms,
            "itl_p95_ms": setup.objective.itl_p95_ms,
            "metric": setup.objective.metric,
        },
        "configurations": rows,
    }


class _NoRunner:
    restarts = 0

    def measure(self, config):
        raise RuntimeError("dry run")


def _print_dry(doc: dict[str, Any]) -> None:
    print(f"{doc['instance']}: {doc['space_size']} configurations in the space; load {doc['load']}")
    for name, values in doc["space"].items():
        print(f"  {name}: {', '.join(map(str, values))}")
    print("one flag from the start (planner's KV tokens, requests of this workload it holds):")
    for row in doc["configurations"]:
        change = ", ".join(f"{k}={v}" for k, v in row["changed"].items()) or "(starting flags)"
        p = row["prediction"]
        verdict = "launch" if row["launch"] else f"not launched: {row['why_not']}"
        print(
            f"  {change:<40} {p['kv_cache_tokens'] or '--':>10} {_f(p['workload_concurrency'], '.0f'):>6}  {verdict}"
        )


def options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of a tune, as recorded for a resume."""
    return {k: v for k, v in vars(args).items() if k not in NOT_RESUMED and not callable(v)}


def child_argv(args: argparse.Namespace, words: list[str]) -> list[str]:
    """The command line of the detached tune: the same settings, without --detach."""
    argv = [sys.executable, "-m", "vtui", "tune", *words]
    for dest, option in VALUE_OPTIONS:
        value = getattr(args, dest, None)
        if value is not None:
            argv += [option, str(value)]
    for fix in args.fix or []:
        argv += ["--fix", fix]
    argv += [option for dest, option in SWITCHES if getattr(args, dest, False)]
    return argv


def _detach(setup: _Setup, args: argparse.Namespace) -> int:
    """Start the tune in its own session (no terminal: an SSH drop or the dashboard closing does not
    reach it), its output in its log; return once it has written its progress file."""
    import os
    import subprocess

    from vtui.commands._runs import print_json

    words = [setup.layout_path, setup.name] if setup.layout_path else list(args.words)
    log = progress.log_path(setup.session.name, setup.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        os.chmod(log, 0o600)
        proc = subprocess.Popen(
            child_argv(args, words),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        doc = progress.read(setup.progress_file)
        if doc is not None and doc.get("pid") == proc.pid:
            info = {"pid": proc.pid, "progress": str(setup.progress_file), "log": str(log)}
            if args.json:
                print_json(info)
            else:
                print(f"tune of {setup.name} running detached (pid {proc.pid})")
                print(f"progress: {setup.progress_file}\nlog: {log}")
            return 0
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-5:]
            print(
                f"vtui tune: the detached tune exited ({proc.returncode}): " + " | ".join(tail),
                file=sys.stderr,
            )
            return proc.returncode or 1
        time.sleep(0.1)
    print(
        f"vtui tune: the detached tune (pid {proc.pid}) wrote no progress in 60 s; see {log}", file=sys.stderr
    )
    return 1


class _Abort(KeyboardInterrupt):
    """SIGTERM (`T`'s abort, `kill`) or SIGHUP: stop like Ctrl-C, putting the original flags back."""


def _abort_on_signals(detached: bool) -> None:
    import signal

    def handler(signum: int, frame: object) -> None:
        raise _Abort(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, signal.SIG_IGN if detached else handler)


def _restore_only(setup: _Setup, args: argparse.Namespace) -> int:
    from vtui.tune.runner import SupervisorRunner

    doc = dict(setup.previous or {})
    runner = SupervisorRunner(setup.session.client, setup.name, bench_config(setup, args), defaults={})
    runner.apply(setup.original, exact=True)
    doc.update(state="aborted", message="original flags restored (--restore)", current=None)
    progress.write(setup.progress_file, doc)
    print(f"{setup.name}: running with its original flags again", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    import os

    from vtui.commands._runs import CommandError, ServiceError, ServiceUnavailable, print_json

    try:
        setup = _Setup(args)
    except CommandError as exc:
        return exc.code
    except (ValueError, KeyError) as exc:
        print(f"vtui tune: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        doc = dry_run(setup)
        print_json(doc) if args.json else _print_dry(doc)
        return 0
    if args.restore:
        return _restore_only(setup, args)
    if args.detach:
        return _detach(setup, args)
    from vtui.tune import Search, StartFailed
    from vtui.tune.runner import SupervisorRunner

    lock = _lock(setup)
    if lock is None:
        print(f"vtui tune: a tune of {setup.name} is running already", file=sys.stderr)
        return 2
    _abort_on_signals(detached=os.getsid(0) == os.getpid())
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
        what = f"{m.req_per_s:.2f} req/s, TTFT p95 {_f(m.ttft_p95_ms, '.0f')} ms" if m else trial.infeasible
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
        restored = _restore(live, setup, exc)
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
        "baseline": _summary(result.baseline, setup, effective),
        "trials": [trial_json(t, setup.start, setup.objective) for t in result.trials],
        "best": _summary(result.best, setup, effective),
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
    code = _write_outputs(doc, result, live, setup, args)
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


def _lock(setup: _Setup):
    """One tune per instance: an exclusive lock held for the tune's life (two starts racing, as two
    quick ctrl+r in the dashboard, leave one running). None when another tune holds it."""
    import fcntl

    setup.progress_file.parent.mkdir(parents=True, exist_ok=True)
    handle = open(setup.progress_file.with_suffix(".lock"), "a")  # noqa: SIM115 (held until exit)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


class _Reconnecting:
    """The supervisor's client for putting flags back: when the supervisor is gone (killed), the next
    call starts a new one for the layout (it re-adopts the instances) and asks again."""

    def __init__(self, client, session: str, layout_path: str | None) -> None:
        self.client, self.session, self.layout_path = client, session, layout_path

    def _call(self, method: str, *a: Any, **kw: Any) -> dict[str, Any]:
        from vtui.service.client import ServiceUnavailable, ensure_supervisor

        try:
            return getattr(self.client, method)(*a, **kw)
        except ServiceUnavailable:
            if not self.layout_path:
                raise
            self.client, _ = ensure_supervisor(self.session, self.layout_path)
            return getattr(self.client, method)(*a, **kw)

    def get(self, target: str, **kw: Any) -> dict[str, Any]:
        return self._call("get", target, **kw)

    def post(self, target: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return self._call("post", target, body, **kw)


def _restore(runner, setup: _Setup, exc: BaseException) -> bool:
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut the restore short
        signal.signal(sig, signal.SIG_IGN)
    reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
    print(f"vtui tune: {reason}; putting the original flags back", file=sys.stderr)
    runner.client = _Reconnecting(runner.client, setup.session.name, setup.layout_path)
    try:
        runner.apply(setup.original, exact=True)
        print(f"{setup.name}: running with its original flags again", file=sys.stderr)
        return True
    except BaseException as again:  # noqa: BLE001 (report, never hide the first error)
        print(f"vtui tune: could not restore {setup.name}'s flags: {again}", file=sys.stderr)
        return False


def _write_outputs(doc, result, runner, setup: _Setup, args: argparse.Namespace) -> int:
    from vtui.bench import make_baseline, save_baseline
    from vtui.core.atomic import atomic_write_text
    from vtui.core.paths import state_dir
    from vtui.tune.runner import running_flags

    folder = state_dir() / "tune"
    folder.mkdir(parents=True, exist_ok=True)
    stem = time.strftime("%Y%m%d-%H%M%S") + f"-{setup.name}"
    bench = runner.results.get(result.best.config)
    final_flags = running_flags(setup.session.client, setup.name)
    if bench is not None:
        baseline = make_baseline(
            bench,
            flags=final_flags,
            model=setup.model,
            engine=setup.engine,
            gpu_hour_price=setup.gpu_hour_price,
            gpus=setup.gpus,
        )
        doc["baseline_file"] = str(save_baseline(folder / f"{stem}-baseline.json", baseline))
    report = folder / f"{stem}.json"
    doc["report"] = str(report)
    atomic_write_text(report, json.dumps(doc, indent=2, default=str) + "\n")
    atomic_write_text(folder / f"{stem}.txt", render_table(doc) + "\n")
    print(f"report: {report} (+ .txt)", file=sys.stderr)
    if args.save:
        import contextlib

        from vtui.commands.restart import _save

        with contextlib.redirect_stdout(sys.stderr):  # its "flags saved" line: stdout stays the JSON
            return _save(Path(setup.layout_path) if setup.layout_path else None, setup.name, final_flags)
    return 0
