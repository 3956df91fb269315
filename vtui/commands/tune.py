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

HELP = "find the best flags for a workload under TTFT/ITL SLOs (restarts the instance per trial)"
DEFAULT_LOAD_CAP = 256  # the starting load is the instance's max concurrency, at most this


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
    parser.add_argument("--save", action="store_true", help="write the best flags into the layout file")
    parser.add_argument("--json", action="store_true")


class _Setup:
    """Everything a tune needs, gathered from the supervisor's view of the instance."""

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
        status = self.session.status()
        inst = next(i for i in status["instances"] if i["name"] == self.name)
        if inst["state"] != "ready":
            raise ValueError(f"{self.name} is {inst['state']}: start it first (`vtui up`), then tune it")
        self.layout_path = status.get("layout_path")
        spec = inst["spec"]
        self.engine, self.model = spec.get("engine"), spec.get("model")
        facts = inst.get("facts") or {}
        self.original = running_flags(self.session.client, self.name)
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
        context = args.context or (int(running_len) if isinstance(running_len, int) else None)
        if context is None:
            raise ValueError("give --context N: the instance's context length is not known yet")
        max_conc = facts.get("max_concurrency")
        self.concurrency = args.concurrency or (
            max(1, min(DEFAULT_LOAD_CAP, int(max_conc))) if max_conc else 32
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
        calibration = logged / planned if logged and planned else 1.0
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


def trial_json(trial, start, objective) -> dict[str, Any]:
    from vtui.tune import meets_slo

    return {
        "index": trial.index,
        "stage": trial.stage,
        "changed": trial.config.changed(start),
        "flags": trial.config.flags,
        "launched": trial.launched,
        "scored_from": "measurement" if trial.measurement is not None else "plan",
        "prediction": trial.prediction.to_json() if trial.prediction else None,
        "measurement": trial.result.to_json() if trial.result else None,
        "measurements": 1 + len(trial.repeats) if trial.measurement is not None else 0,
        "infeasible": trial.infeasible,
        "diagnosis": list(trial.diagnosis),
        "meets_slo": meets_slo(trial.result, objective),
    }


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


def run(args: argparse.Namespace) -> int:
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
    from vtui.tune import Search, StartFailed
    from vtui.tune.runner import SupervisorRunner

    runner = SupervisorRunner(
        setup.session.client,
        setup.name,
        bench_config(setup, args),
        defaults=setup.defaults,
        warmup_requests=args.warmup,
    )

    def progress(trial) -> None:
        if args.json:
            return
        m = trial.result
        what = f"{m.req_per_s:.2f} req/s, TTFT p95 {_f(m.ttft_p95_ms, '.0f')} ms" if m else trial.infeasible
        change = ", ".join(f"{k}={v}" for k, v in trial.config.changed(setup.start).items()) or "start"
        print(f"trial {trial.index} [{trial.stage}] {change}: {what}", file=sys.stderr, flush=True)

    search = Search(
        setup.space,
        setup.start,
        runner,
        setup.objective,
        setup.predictor,
        max_trials=args.max_trials,
        workload_tokens=setup.workload_tokens,
        on_trial=progress,
    )
    try:
        result = search.run()
        if result.best.config == setup.start:
            runner.apply(setup.original, exact=True)
        else:
            runner.apply(result.best.config.flags)
        result.restarts = runner.restarts  # the final apply included
    except BaseException as exc:  # Ctrl-C, a failed start of the final flags, the supervisor gone: undo
        _restore(runner, setup, exc)
        if isinstance(exc, KeyboardInterrupt):
            return 130
        if isinstance(exc, (StartFailed, ServiceError, ServiceUnavailable, OSError, RuntimeError)):
            return 1
        raise
    effective = runner.effective
    doc = {
        "instance": setup.name,
        "baseline": _summary(result.baseline, setup, effective),
        "trials": [trial_json(t, setup.start, setup.objective) for t in result.trials],
        "best": _summary(result.best, setup, effective),
        "restarts": result.restarts,
        "launched": result.launched,
        "stopped": result.stopped,
        "objective": {
            "ttft_p95_ms": args.ttft_p95_ms,
            "itl_p95_ms": args.itl_p95_ms,
            "metric": args.objective,
        },
    }
    code = _write_outputs(doc, result, runner, setup, args)
    print_json(doc) if args.json else print(render_table(doc))
    return code


def _restore(runner, setup: _Setup, exc: BaseException) -> None:
    reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
    print(f"vtui tune: {reason}; putting the original flags back", file=sys.stderr)
    try:
        runner.apply(setup.original, exact=True)
        print(f"{setup.name}: running with its original flags again", file=sys.stderr)
    except BaseException as again:  # noqa: BLE001 (report, never hide the first error)
        print(f"vtui tune: could not restore {setup.name}'s flags: {again}", file=sys.stderr)


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
