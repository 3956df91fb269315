"""`vtui tune --dry-run`'s output: the plan (the trial table and the report are `vtui.tune.report`'s)."""

from __future__ import annotations

from typing import Any

from vtui.commands._tune_setup import TuneSetup
from vtui.tune.report import fmt


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
