"""`vtui bench [LAYOUT] NAME|URL`: load-test an instance (by name, through the layout or the last one) or any OpenAI-compatible
URL; print each step beside what the server said; write JSON/CSV; save or compare a baseline."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from vtui.commands._input import Value, bounded, number_list

HELP = "load-test an instance or URL (fixed concurrency, ramp, request rate); save/compare baselines"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "words",
        nargs="+",
        metavar="[LAYOUT] NAME|URL",
        help="layout file (default: the last session's), then an instance name; or a base URL (http://host:port)",
    )
    parser.add_argument("--layout", default=None, help="layout file for NAME (as the first word does)")
    parser.add_argument("--mode", choices=("concurrency", "ramp", "rate"), default="concurrency")
    parser.add_argument(
        "-c",
        "--concurrency",
        type=bounded(0, 1_000_000, integer=True),
        action=Value,
        default=8,
        help="fixed concurrency; the ramp's ceiling; in rate mode a cap (0 = none)",
    )
    parser.add_argument(
        "--levels",
        type=number_list,
        action=Value,
        default=None,
        help="comma-separated ramp concurrencies or request rates",
    )
    parser.add_argument(
        "--rate",
        type=bounded(0, above=True),
        action=Value,
        default=None,
        help="requests per second (rate mode)",
    )
    parser.add_argument(
        "-n",
        "--num-requests",
        type=bounded(1, 10**9, integer=True),
        action=Value,
        default=64,
        help="requests per step",
    )
    parser.add_argument(
        "--duration",
        type=bounded(0, above=True),
        action=Value,
        default=None,
        help="seconds per step (instead of -n)",
    )
    parser.add_argument("--input-len", type=bounded(1, 10**8, integer=True), action=Value, default=128)
    parser.add_argument("--output-len", type=bounded(1, 10**8, integer=True), action=Value, default=64)
    parser.add_argument(
        "--input-len-stddev",
        type=bounded(0, 10**8),
        action=Value,
        default=0.0,
        help="vary prompt lengths: normal around --input-len with this standard deviation (like aiperf)",
    )
    parser.add_argument(
        "--output-len-stddev",
        type=bounded(0, 10**8),
        action=Value,
        default=0.0,
        help="the same for --output-len",
    )
    parser.add_argument(
        "--jitter",
        type=bounded(0, 3600),
        action=Value,
        default=0.0,
        metavar="SECONDS",
        help="start each concurrent stream after a random 0..SECONDS (de-synchronised, as guidellm and "
        "aiperf run; default 0: all streams start together)",
    )
    parser.add_argument("--prompts", type=Path, default=None, help="JSONL prompts instead of synthetic ones")
    parser.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    parser.add_argument("--model", default=None, help="served model name (default: the first listed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--warmup",
        type=bounded(0, 10**9, integer=True),
        action=Value,
        default=0,
        help="unmeasured requests before the first step",
    )
    parser.add_argument(
        "--max-error-rate", type=bounded(0, 1), action=Value, default=0.05, help="ramp stops above this"
    )
    parser.add_argument(
        "--ttft-target",
        type=bounded(0, above=True),
        action=Value,
        default=None,
        help="ramp stops above this TTFT (s)",
    )
    parser.add_argument("--ttft-percentile", choices=("p50", "p95", "p99"), default="p95")
    parser.add_argument(
        "--timeout", type=bounded(0, above=True), action=Value, default=300.0, help="per-request timeout (s)"
    )
    parser.add_argument("--no-metrics", action="store_true", help="do not scrape the server's /metrics")
    parser.add_argument(
        "--out", type=Path, default=None, help="folder for results (default: vtui's runs dir)"
    )
    parser.add_argument("--json", action="store_true", help="print the result JSON instead of a table")
    parser.add_argument("--save-baseline", type=Path, default=None, metavar="PATH")
    parser.add_argument("--compare", type=Path, default=None, metavar="BASELINE")
    parser.add_argument(
        "--threshold",
        type=bounded(0),
        action=Value,
        default=0.05,
        help="relative change counted as regression",
    )
    parser.add_argument(
        "--gpu-hour-price", type=bounded(0), action=Value, default=None, help="price of one GPU-hour"
    )
    parser.add_argument(
        "--gpus",
        type=bounded(1, 100_000, integer=True),
        action=Value,
        default=None,
        help="GPUs the server uses (for cost)",
    )


@dataclass
class Target:
    base_url: str
    name: str | None = None
    flags: dict = field(default_factory=dict)
    flags_from: str = ""  # where `flags` came from: "the run record" (the flags in effect) or "the layout"
    model: str | None = None
    engine: str | None = None
    gpus: int = 1
    gpu_hour_price: float | None = None
    api_key: str | None = None


def layout_and_target(words: list[str], layout: str | None) -> tuple[str | None, str]:
    """`[LAYOUT] NAME|URL`, as every command takes its layout, or `--layout LAYOUT NAME` (not both)."""
    if len(words) == 1:
        return layout, words[0]
    if len(words) == 2 and layout is None:
        return words[0], words[1]
    raise ValueError(
        f"expected [LAYOUT] NAME or a URL, got {' '.join(words)}"
        + (" and --layout" if layout is not None else "")
        + " (one instance at a time)"
    )


def resolve_target(target: str, layout_arg: str | None = None) -> Target:
    """A URL as is; a name through the layout (`--layout`, else the last session's)."""
    if target.startswith(("http://", "https://")):
        return Target(base_url=target.rstrip("/"), api_key=os.environ.get("VLLM_API_KEY"))
    from vtui.core.runstate import RunStore, merge_flags
    from vtui.layouts import resolve_layout_arg
    from vtui.telemetry.flagschema import load_resolved

    layout = load_resolved(resolve_layout_arg(layout_arg))[0]
    try:
        spec = layout.instance(target)
    except KeyError:
        raise ValueError(
            f"no instance {target!r} in {layout.path}; instances: {', '.join(layout.names())}"
        ) from None
    # the flags it runs with (after `restart --set`), not the layout file's: the supervisor's run record
    record = RunStore().load(layout.session.name, spec.name)
    flags_from = "the layout"
    if record is not None and record.flags:
        spec = merge_flags(spec, record.flags)
        flags_from = "the run record"
    flags = dict(spec.flags)
    key = flags.pop("api-key", None)
    tp = _int_flag(flags, "tensor-parallel-size") * _int_flag(flags, "pipeline-parallel-size")
    return Target(
        base_url=spec.base_url,
        name=spec.name,
        flags=flags,
        flags_from=flags_from,
        model=spec.model,
        engine=spec.engine,
        gpus=len(spec.gpus) or tp,
        gpu_hour_price=layout.session.gpu_hour_price,
        api_key=str(key[0] if isinstance(key, list) else key or "") or os.environ.get("VLLM_API_KEY"),
    )


def balancer_warning(result, target: Target) -> str | None:
    """The server columns are not one server's when the URL's scrapes reached several processes."""
    starts = {t for s in result.steps for t in s.server.start_times}
    if not any(s.server.behind_balancer for s in result.steps):
        return None
    where = target.name or target.base_url
    return (
        f"{where} answered /metrics from {len(starts)} processes (process_start_time_seconds alternates): "
        "a load balancer; the server columns mix replicas. Bench each replica's own URL, or the "
        "session's instances by name (vtui bench NAME)"
    )


def _int_flag(flags: dict, name: str) -> int:
    value = flags.get(name, 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _ms(value: float | None) -> str:
    return "--" if value is None else f"{value * 1000:.1f}"


def render_steps(result, gpu_hour_price: float | None = None, gpus: int = 1) -> str:
    from vtui.bench import cost_per_million_output_tokens

    head = (
        f"{'step':<10}{'ok/err':>9}{'req/s':>8}{'out tok/s':>10}{'TTFT p50/p95/p99 ms':>22}"
        f"{'ITL p50/p95 ms':>16}{'e2e p50/p99 s':>15}  server: KV peak, waiting peak, preempt, TTFT mean ms"
    )
    lines = [f"model {result.model} (vLLM {result.server_version or '--'})", head]
    for s in result.steps:
        kv = "--" if s.server.kv_usage_peak is None else f"{s.server.kv_usage_peak:.0%}"
        waiting = "--" if s.server.waiting_peak is None else f"{s.server.waiting_peak:g}"
        pre = "--" if s.server.preemptions is None else f"{s.server.preemptions:g}"
        e2e = f"{s.e2e.p50:.2f}/{s.e2e.p99:.2f}" if s.e2e.p50 is not None else "--"
        line = (
            f"{s.label:<10}{f'{s.completed}/{s.failed}':>9}{s.req_per_s:>8.2f}{s.output_tok_per_s:>10.1f}"
            f"{f'{_ms(s.ttft.p50)}/{_ms(s.ttft.p95)}/{_ms(s.ttft.p99)}':>22}"
            f"{f'{_ms(s.itl.p50)}/{_ms(s.itl.p95)}':>16}{e2e:>15}  {kv}, {waiting}, {pre}, {_ms(s.server.ttft.mean)}"
        )
        if gpu_hour_price is not None:
            cost = cost_per_million_output_tokens(gpu_hour_price, gpus, s.output_tok_per_s)
            line += f"  ${cost:.2f}/M out" if cost is not None else ""
        lines.append(line)
        if s.errors:
            lines.append(f"{'':<10}errors: " + "; ".join(f"{m} ×{c}" for m, c in s.errors))
    if result.stop_reason:
        lines.append(result.stop_reason)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from vtui.bench import (
        BenchConfig,
        compare,
        context_differences,
        load_baseline,
        make_baseline,
        result_json,
        run_bench,
        save_baseline,
        write_results,
    )
    from vtui.bench.baseline import render_changes
    from vtui.core.paths import runs_dir

    try:
        layout_arg, target_word = layout_and_target(args.words, args.layout)
        target = resolve_target(target_word, layout_arg)
        config = BenchConfig(
            base_url=target.base_url,
            model=args.model,
            mode=args.mode,
            concurrency=args.concurrency,
            levels=args.levels or (),
            request_rate=args.rate,
            num_requests=args.num_requests,
            duration_s=args.duration,
            input_len=args.input_len,
            output_len=args.output_len,
            prompts_file=args.prompts,
            endpoint=args.endpoint,
            seed=args.seed,
            timeout_s=args.timeout,
            max_error_rate=args.max_error_rate,
            ttft_target_s=args.ttft_target,
            ttft_percentile=args.ttft_percentile,
            scrape_metrics=not args.no_metrics,
            api_key=target.api_key,
            warmup_requests=args.warmup,
            jitter_s=args.jitter,
            input_len_stddev=args.input_len_stddev,
            output_len_stddev=args.output_len_stddev,
        )
        config.step_levels()
        baseline = load_baseline(args.compare) if args.compare else None
    except Exception as exc:  # noqa: BLE001 — layout, arguments, baseline file: one clear line, no traceback
        print(f"vtui bench: {exc}", file=sys.stderr)
        return 2

    def on_progress(p) -> None:
        if p.phase == "step-start" and not args.json:
            print(
                f"step {p.step_index + 1}/{p.steps_total}: {'rate' if args.mode == 'rate' else 'c'}={p.level:g} …",
                file=sys.stderr,
                flush=True,
            )

    try:
        result = asyncio.run(run_bench(config, on_progress))
    except Exception as exc:  # noqa: BLE001 — server down, bad answer: one clear line, no traceback
        print(f"vtui bench: {target.base_url}: {exc}", file=sys.stderr)
        return 2
    price = args.gpu_hour_price if args.gpu_hour_price is not None else target.gpu_hour_price
    gpus = args.gpus or target.gpus
    stem = time.strftime("bench-%Y%m%d-%H%M%S") + (f"-{target.name}" if target.name else "")
    json_path, csv_path = write_results(result, args.out or (runs_dir() / "bench"), stem)
    print(json.dumps(result_json(result), indent=2) if args.json else render_steps(result, price, gpus))
    print(f"results: {json_path} and {csv_path}", file=sys.stderr)
    balancer = balancer_warning(result, target)
    if balancer:
        print(f"warning: {balancer}", file=sys.stderr)
    doc = (
        make_baseline(
            result,
            flags=target.flags,
            flags_source=target.flags_from or None,
            model=target.model,
            engine=target.engine,
            gpu_hour_price=price,
            gpus=gpus,
        )
        if args.save_baseline or baseline is not None
        else None
    )
    if args.save_baseline and doc is not None:
        print(f"baseline saved: {save_baseline(args.save_baseline, doc)}", file=sys.stderr)
    if baseline is not None and doc is not None:
        for note in context_differences(doc, baseline):
            print(f"note: {note}", file=sys.stderr)
        changes = compare(result, baseline, args.threshold)
        print(
            render_changes(changes) or "no step matches the baseline's steps",
            file=sys.stderr if args.json else sys.stdout,
        )
        if any(c.regression for c in changes):
            print(f"regressions beyond {args.threshold:.0%} against {args.compare}", file=sys.stderr)
            return 1
    return 0
