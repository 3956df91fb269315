"""`vtui metrics FILE|URL`: one /metrics payload (a saved file, a pasted excerpt, or a live server)
read the way the dashboard reads it."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

import httpx

from vtui.commands._input import Value, read_text_input, seconds
from vtui.telemetry.metrics import MetricsSample, Percentiles, sample_of
from vtui.telemetry.promtext import vllm_families
from vtui.telemetry.scrape import ScrapeLoop

HELP = "read one vLLM /metrics payload (file, - for stdin, or URL)"

JSON_KEYS = (
    "running",
    "waiting",
    "kv_usage",
    "kv_capacity_tokens",
    "prompt_tokens_total",
    "generation_tokens_total",
    "preemptions_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "block_size",
    "sleep_state",
    "sleep_level",
    "engines",
    "vllm_names",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a saved payload, - for stdin, or http://host:port[/metrics]")
    parser.add_argument("--json", action="store_true", help="print the sample's main values as JSON")
    parser.add_argument(
        "--timeout", type=seconds, action=Value, default=5.0, help="seconds to wait for a URL (default 5)"
    )
    add_key_arguments(parser)


def add_key_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the bearer token of a server started with --api-key comes from: a file or VLLM_API_KEY,
    never the command line (every local user reads it in `ps`)."""
    parser.add_argument(
        "--api-key-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="file holding the bearer token for a server started with --api-key (default: $VLLM_API_KEY)",
    )
    parser.add_argument("--api-key", default=None, help=argparse.SUPPRESS)


def api_key_of(args: argparse.Namespace) -> str | None:
    """The token from --api-key-file, else VLLM_API_KEY. A key given with --api-key is refused: it is
    already visible in `ps`; the message says what to use instead. Raises ValueError (exit 2)."""
    if getattr(args, "api_key", None) is not None:
        raise ValueError(
            "--api-key on the command line is visible to every local user (ps, /proc); "
            "put the key in a file and pass --api-key-file PATH, or set VLLM_API_KEY"
        )
    path = getattr(args, "api_key_file", None)
    if path is not None:
        try:
            key = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise ValueError(f"--api-key-file {path}: cannot read it ({reason})") from None
        if not key or any(c.isspace() for c in key):
            raise ValueError(f"--api-key-file {path}: expected one token on one line")
        return key
    return os.environ.get("VLLM_API_KEY") or None


def _fetch(url: str, timeout: float, api_key: str | None) -> MetricsSample:
    base = url[: -len("/metrics")] if url.rstrip("/").endswith("/metrics") else url
    errors: list[str] = []
    loop = ScrapeLoop(
        "", base.rstrip("/"), lambda s: None, timeout=timeout, api_key=api_key, on_error=errors.append
    )
    sample = asyncio.run(loop.scrape_once())
    if sample is None:
        raise OSError(errors[-1] if errors else f"no answer from {url}")
    return sample


def to_json(sample: MetricsSample) -> dict[str, object]:
    return {k: getattr(sample, k) for k in JSON_KEYS}


def _v(value: float | None, fmt: str = "{:g}") -> str:
    return "--" if value is None else fmt.format(value)


def _p(p: Percentiles) -> str:
    return " / ".join(_v(x, "{:.3f}") for x in (p.p50, p.p95, p.p99))


def render(s: MetricsSample) -> str:
    reasons = ", ".join(f"{k} {v:g}" for k, v in s.waiting_by_reason.items())
    rows = [
        (
            "metric names",
            (s.vllm_names or "--") + (f" ({s.engines} engines)" if s.engines and s.engines > 1 else ""),
        ),
        ("running / waiting", f"{_v(s.running)} / {_v(s.waiting)}" + (f"  ({reasons})" if reasons else "")),
        ("KV cache usage", _v(s.kv_usage, "{:.1%}")),
        *(
            (
                f"  engine {r.engine}: run / wait / KV",
                f"{_v(r.running)} / {_v(r.waiting)} / {_v(r.kv_usage, '{:.1%}')}",
            )
            for r in s.ranks
        ),
        (
            "KV capacity (tokens)",
            _v(s.kv_capacity_tokens, "{:,}") + (f"  (block size {s.block_size})" if s.block_size else ""),
        ),
        (
            "prompt / generation tokens",
            f"{_v(s.prompt_tokens_total, '{:,.0f}')} / {_v(s.generation_tokens_total, '{:,.0f}')}",
        ),
        ("preemptions", _v(s.preemptions_total, "{:,.0f}")),
        (
            "sleep state / level",
            f"{s.sleep_state or '--'} / {_v(s.sleep_level)}",
        ),
        (
            "prefix cache hits / queries",
            f"{_v(s.prefix_cache_hits_total, '{:,.0f}')} / {_v(s.prefix_cache_queries_total, '{:,.0f}')}",
        ),
        ("prefix cache hit rate", _v(s.prefix_hit_rate, "{:.1%}")),
        ("TTFT p50/p95/p99 (s)", _p(s.ttft)),
        ("inter-token p50/p95/p99 (s)", _p(s.itl)),
        ("end-to-end p50/p95/p99 (s)", _p(s.e2e)),
        ("queue time p50/p95/p99 (s)", _p(s.queue)),
    ]
    note = "(one payload: latencies since the server started; rates need two scrapes)"
    return "\n".join(f"{k:<30} {v}" for k, v in rows) + "\n" + note


def run(args: argparse.Namespace) -> int:
    source: str = args.source
    url = source.startswith(("http://", "https://"))
    try:
        if not 0 < args.timeout < float("inf"):
            raise ValueError(f"--timeout {args.timeout:g}: expected a number of seconds > 0")
        api_key = api_key_of(args)
        if url:
            sample = _fetch(source, args.timeout, api_key)
        else:
            text = read_text_input(source)
            sample = sample_of(text)
            if all(getattr(sample, k) is None for k in JSON_KEYS) and not vllm_families(text):
                raise ValueError(f"{'stdin' if source == '-' else source}: no vLLM metrics (vllm:...) in it")
    except ValueError as exc:
        print(f"vtui metrics: {exc}", file=sys.stderr)
        return 2
    except (OSError, httpx.HTTPError) as exc:
        print(f"vtui metrics: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(to_json(sample), indent=2) if args.json else render(sample))
    return 0
