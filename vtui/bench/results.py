"""Bench results as files: the whole run as JSON, one CSV row per step (client and server side by side)."""

from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import asdict
from pathlib import Path

from vtui.bench.types import BenchResult, StepResult
from vtui.core.atomic import atomic_write_text

CSV_COLUMNS = (
    "step",
    "concurrency",
    "request_rate",
    "requests",
    "completed",
    "failed",
    "error_rate",
    "duration_s",
    "req_per_s",
    "output_tok_per_s",
    "total_tok_per_s",
    "ttft_mean",
    "ttft_p50",
    "ttft_p95",
    "ttft_p99",
    "itl_mean",
    "itl_p50",
    "itl_p95",
    "itl_p99",
    "e2e_mean",
    "e2e_p50",
    "e2e_p95",
    "e2e_p99",
    "tpot_mean",
    "server_kv_usage_peak",
    "server_waiting_peak",
    "server_running_peak",
    "server_preemptions",
    "server_ttft_mean",
    "server_ttft_p50",
    "server_ttft_p95",
    "server_requests",
    "server_load_scrapes",
    "breaks",
)


def step_row(step: StepResult) -> dict[str, object]:
    row: dict[str, object] = {
        "step": step.index,
        "concurrency": step.concurrency,
        "request_rate": step.request_rate,
        "requests": step.requests,
        "completed": step.completed,
        "failed": step.failed,
        "error_rate": step.error_rate,
        "duration_s": step.duration_s,
        "req_per_s": step.req_per_s,
        "output_tok_per_s": step.output_tok_per_s,
        "total_tok_per_s": step.total_tok_per_s,
        "tpot_mean": step.tpot_mean,
        "breaks": step.breaks,
    }
    for name in ("ttft", "itl", "e2e"):
        d = getattr(step, name)
        row.update({f"{name}_mean": d.mean, f"{name}_p50": d.p50, f"{name}_p95": d.p95, f"{name}_p99": d.p99})
    s = step.server
    row.update(
        {
            "server_kv_usage_peak": s.kv_usage_peak,
            "server_waiting_peak": s.waiting_peak,
            "server_running_peak": s.running_peak,
            "server_preemptions": s.preemptions,
            "server_ttft_mean": s.ttft.mean,
            "server_ttft_p50": s.ttft.p50,
            "server_ttft_p95": s.ttft.p95,
            "server_requests": s.requests,
            "server_load_scrapes": s.load_scrapes,
        }
    )
    return row


def result_json(result: BenchResult) -> dict[str, object]:
    config = asdict(result.config)
    config["prompts_file"] = str(result.config.prompts_file) if result.config.prompts_file else None
    config.pop("api_key", None)
    steps = []
    for step in result.steps:
        data = asdict(step)
        data["error_rate"] = step.error_rate
        data["label"] = step.label
        data["errors"] = [{"message": m, "count": c} for m, c in step.errors]
        steps.append(data)
    return {
        "kind": "vtui-bench",
        "version": 1,
        "model": result.model,
        "server_version": result.server_version,
        "started_at": result.started_at,
        "stop_reason": result.stop_reason,
        "config": config,
        "steps": steps,
    }


def csv_text(result: BenchResult) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for step in result.steps:
        writer.writerow({k: "" if v is None else v for k, v in step_row(step).items()})
    return out.getvalue()


def write_results(result: BenchResult, out_dir: Path, stem: str | None = None) -> tuple[Path, Path]:
    """Write `<stem>.json` and `<stem>.csv` under out_dir (atomically); returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = stem or time.strftime("bench-%Y%m%d-%H%M%S", time.localtime(result.started_at))
    json_path, csv_path = out_dir / f"{stem}.json", out_dir / f"{stem}.csv"
    atomic_write_text(json_path, json.dumps(result_json(result), indent=2) + "\n")
    atomic_write_text(csv_path, csv_text(result))
    return json_path, csv_path
