"""`vtui tune`'s output: the dry run's plan, the trial table, the best and baseline summaries, and the
report, baseline and `--save` written at the end."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from vtui.commands._tune_setup import TuneSetup


def summary(trial, setup: TuneSetup, effective) -> dict[str, Any]:
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
            f"{fmt(m.get('req_per_s'), '.2f'):>8}{fmt(m.get('ttft_p95_ms'), '.0f'):>10}"
            f"{fmt(m.get('itl_p95_ms'), '.1f'):>9}{(f'{kv:.0%}' if kv is not None else '--'):>6}"
            f"{fmt(m.get('preemptions'), 'g'):>5}  {change}{'  ✓' if t['meets_slo'] else ''}"
            + (f"  [{note}]" if note else "")
        )
    b, best = doc["baseline"], doc["best"]
    lines.append(
        f"baseline {fmt(b['goodput_rps'], '.2f')} req/s, TTFT p95 {fmt(b['ttft_p95_ms'], '.0f')} ms "
        f"({'meets' if b['meets_slo'] else 'misses'} the SLO)"
    )
    lines.append(
        f"best     {fmt(best['goodput_rps'], '.2f')} req/s, TTFT p95 {fmt(best['ttft_p95_ms'], '.0f')} ms "
        f"({'meets' if best['meets_slo'] else 'misses'} the SLO); {doc['restarts']} restarts"
    )
    return "\n".join(lines)


def fmt(value: object, spec: str) -> str:
    return "--" if value is None else format(value, spec)


def dry_run(setup: TuneSetup) -> dict[str, Any]:
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


def print_dry(doc: dict[str, Any]) -> None:
    print(f"{doc['instance']}: {doc['space_size']} configurations in the space; load {doc['load']}")
    for name, values in doc["space"].items():
        print(f"  {name}: {', '.join(map(str, values))}")
    print("one flag from the start (planner's KV tokens, requests of this workload it holds):")
    for row in doc["configurations"]:
        change = ", ".join(f"{k}={v}" for k, v in row["changed"].items()) or "(starting flags)"
        p = row["prediction"]
        verdict = "launch" if row["launch"] else f"not launched: {row['why_not']}"
        print(
            f"  {change:<40} {p['kv_cache_tokens'] or '--':>10} {fmt(p['workload_concurrency'], '.0f'):>6}  {verdict}"
        )


def write_outputs(doc, result, runner, setup: TuneSetup, args: argparse.Namespace) -> int:
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
        from vtui.commands.restart import save_flags

        code, saved = save_flags(
            Path(setup.layout_path) if setup.layout_path else None, setup.name, final_flags
        )
        if saved is not None:
            print(f"{setup.name}: flags saved to {saved}", file=sys.stderr)  # stdout stays the JSON
        return code
    return 0
