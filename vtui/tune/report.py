"""A tune's report: the baseline and best summaries, the trial table (text), and the files written at
the end (report JSON + table, the best's bench result as a baseline), in `$XDG_STATE_HOME/vtui/tune/`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vtui.bench import BenchResult
from vtui.tune.search import Objective, Trial, meets_slo


def summary(
    trial: Trial, objective: Objective, effective: Callable[[Mapping[str, object]], dict[str, Any]]
) -> dict[str, Any]:
    m = trial.result
    spread = trial.spread(objective)
    return {
        "flags": effective(trial.config.flags),
        "goodput_rps": round(m.req_per_s, 4) if m else None,
        "output_tok_per_s": round(m.output_tok_per_s, 2) if m else None,
        "ttft_p95_ms": round(m.ttft_p95_ms, 2) if m and m.ttft_p95_ms is not None else None,
        "itl_p95_ms": round(m.itl_p95_ms, 2) if m and m.itl_p95_ms is not None else None,
        "meets_slo": meets_slo(m, objective),
        "spread": spread.to_json() if spread else None,
    }


def fmt(value: object, spec: str) -> str:
    return "--" if value is None else format(value, spec)


def render_table(doc: Mapping[str, Any]) -> str:
    head = (
        f"{'#':>3} {'stage':<12}{'run':<6}{'req/s':>8}{'±sd':>7}{'n':>3}{'TTFT p95':>10}{'ITL p95':>9}"
        f"{'KV':>6}{'pre':>5}  change"
    )
    lines = [head]
    for t in doc["trials"]:
        m = t["measurement"] or {}
        sp = t.get("spread") or {}
        change = ", ".join(f"{k}={v}" for k, v in t["changed"].items()) or "(starting flags)"
        note = t["infeasible"] or ""
        kv = m.get("kv_peak")
        lines.append(
            f"{t['index']:>3} {t['stage']:<12}{'yes' if t['launched'] else 'plan':<6}"
            f"{fmt(m.get('req_per_s'), '.2f'):>8}{fmt(sp.get('stdev'), '.2f'):>7}{fmt(sp.get('n'), 'd'):>3}"
            f"{fmt(m.get('ttft_p95_ms'), '.0f'):>10}"
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
    if doc.get("verdict"):
        lines.append(f"verdict: {doc['verdict']}")
    return "\n".join(lines)


def write_report(
    doc: dict[str, Any],
    bench: BenchResult | None,
    *,
    name: str,
    final_flags: Mapping[str, object],
    model: str | None,
    engine: str | None,
    gpu_hour_price: float | None = None,
    gpus: int = 1,
) -> None:
    """The report (JSON + the table as text) and, when the best was benchmarked, its result as a
    baseline with the flags that run; their paths go into `doc`."""
    from vtui.bench import make_baseline, save_baseline
    from vtui.core.atomic import atomic_write_text
    from vtui.core.paths import state_dir

    folder = state_dir() / "tune"
    folder.mkdir(parents=True, exist_ok=True)
    stem = time.strftime("%Y%m%d-%H%M%S") + f"-{name}"
    if bench is not None:
        baseline = make_baseline(
            bench,
            flags=dict(final_flags),
            model=model,
            engine=engine,
            gpu_hour_price=gpu_hour_price,
            gpus=gpus,
        )
        doc["baseline_file"] = str(save_baseline(folder / f"{stem}-baseline.json", baseline))
    report: Path = folder / f"{stem}.json"
    doc["report"] = str(report)
    atomic_write_text(report, json.dumps(doc, indent=2, default=str) + "\n")
    atomic_write_text(folder / f"{stem}.txt", render_table(doc) + "\n")
