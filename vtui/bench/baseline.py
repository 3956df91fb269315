"""Baselines: the final flags, vLLM version, model (+ revision and weights hash when known) and bench
results saved as one JSON file; a later run compared against it reports regressions beyond a threshold; cost per million
output tokens from a GPU-hour price.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vtui.bench.results import result_json
from vtui.bench.types import BenchResult
from vtui.core.atomic import atomic_write_text

# (metric key in a step's JSON, higher is better)
METRICS: tuple[tuple[str, bool], ...] = (
    ("req_per_s", True),
    ("output_tok_per_s", True),
    ("total_tok_per_s", True),
    ("ttft.p50", False),
    ("ttft.p95", False),
    ("itl.p50", False),
    ("itl.p95", False),
    ("e2e.p50", False),
    ("e2e.p95", False),
)
_SNAPSHOT = re.compile(r"/snapshots/([0-9a-f]{7,64})/?$")


def model_revision(model: str, flags: Mapping[str, object] | None = None) -> str | None:
    """The revision flag, else the commit of an HF cache snapshot path."""
    if flags and flags.get("revision"):
        return str(flags["revision"])
    match = _SNAPSHOT.search(str(model))
    return match.group(1) if match else None


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
HASH_LIMIT_BYTES = 2 * 2**30
_BLOB = re.compile(r"[0-9a-f]{64}")


def weights_fingerprint(model: str, limit: int = HASH_LIMIT_BYTES) -> dict[str, object] | None:
    """One sha256 for a local model's weight files (over "name<TAB>sha256" lines): files linked into the
    Hugging Face cache are named there by the sha256 of their content, so those are not read; other
    files are hashed if all of them together stay under `limit` bytes. None when the model is not a
    local folder, has no weight files, or is too large to read."""
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return None
    files = sorted(p for p in folder.rglob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not files:
        return None
    known: dict[str, str] = {}
    unread: list[Path] = []
    for path in files:
        target = path.resolve()
        if path.is_symlink() and target.parent.name == "blobs" and _BLOB.fullmatch(target.name):
            known[str(path.relative_to(folder))] = target.name
        else:
            unread.append(path)
    if sum(p.stat().st_size for p in unread) > limit:
        return None
    for path in unread:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
        known[str(path.relative_to(folder))] = digest.hexdigest()
    lines = "".join(f"{name}\t{sha}\n" for name, sha in sorted(known.items()))
    method = "content" if len(unread) == len(files) else "hf-cache-names" if not unread else "mixed"
    return {"sha256": hashlib.sha256(lines.encode()).hexdigest(), "files": len(files), "method": method}


def context_differences(current: Mapping[str, object], baseline: Mapping[str, object]) -> list[str]:
    """What differs between the run and the baseline besides the figures (other weights, vLLM, flags):
    a regression may come from these rather than from the change being tested."""
    notes = []
    for key, what in (
        ("model", "model"),
        ("model_revision", "model revision"),
        ("weights_sha256", "weights (sha256)"),
        ("vllm_version", "vLLM version"),
    ):
        a, b = baseline.get(key), current.get(key)
        if a and b and a != b:
            notes.append(f"{what}: baseline {a}, now {b}")
    old, new = baseline.get("flags"), current.get("flags")
    if isinstance(old, Mapping) and isinstance(new, Mapping) and dict(old) != dict(new):
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        notes.append(
            "flags: " + ", ".join(f"{k} {old.get(k, '(unset)')} -> {new.get(k, '(unset)')}" for k in changed)
        )
    return notes


def cost_per_million_output_tokens(gpu_hour_price: float, gpus: int, output_tok_per_s: float) -> float | None:
    """Price of a million output tokens at this throughput: price × GPUs / (tokens per hour) × 1e6."""
    if output_tok_per_s <= 0:
        return None
    return gpu_hour_price * max(1, gpus) / (output_tok_per_s * 3600.0) * 1e6


def make_baseline(
    result: BenchResult,
    *,
    flags: Mapping[str, object] | None = None,
    flags_source: str | None = None,
    model: str | None = None,
    engine: str | None = None,
    gpu_hour_price: float | None = None,
    gpus: int = 1,
) -> dict[str, object]:
    """`flags`: the flags in effect (the run record's after `restart --set`), `flags_source` says which."""
    data = result_json(result)
    name = model or result.model
    baseline: dict[str, object] = {
        "kind": "vtui-baseline",
        "version": 1,
        "vllm_version": result.server_version,
        "model": name,
        "model_revision": model_revision(name, flags),
        "weights_sha256": None,
        "weights_hash_method": None,
        "served_model": result.model,
        "engine": engine,
        "flags": dict(flags or {}),
        "flags_source": flags_source,
        "gpus": gpus,
        "gpu_hour_price": gpu_hour_price,
        "bench": data,
    }
    weights = weights_fingerprint(name) if name else None
    if weights is not None:
        baseline["weights_sha256"], baseline["weights_hash_method"] = weights["sha256"], weights["method"]
    if gpu_hour_price is not None:
        baseline["cost_per_million_output_tokens"] = [
            cost_per_million_output_tokens(gpu_hour_price, gpus, s.output_tok_per_s) for s in result.steps
        ]
    return baseline


def save_baseline(path: Path, baseline: Mapping[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(baseline, indent=2, default=str) + "\n")
    return path


def load_baseline(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("kind") not in ("vtui-baseline", "vtui-bench"):
        raise ValueError(f"{path}: not a vtui baseline or bench result")
    return data


@dataclass(frozen=True)
class Change:
    step: str
    metric: str
    baseline: float
    current: float
    change: float  # relative, signed (+ = larger)
    regression: bool


def _steps(data: Mapping[str, object]) -> dict[str, Mapping[str, object]]:
    bench = data.get("bench", data)
    steps = bench.get("steps", []) if isinstance(bench, Mapping) else []
    return {str(s.get("label")): s for s in steps if isinstance(s, Mapping)}


def _get(step: Mapping[str, object], key: str) -> float | None:
    value: object = step
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return float(value) if isinstance(value, (int, float)) else None


def compare(
    current: BenchResult | Mapping[str, object], baseline: Mapping[str, object], threshold: float = 0.05
) -> list[Change]:
    """Per matching step (same concurrency or rate), each metric's relative change; a regression is a
    change for the worse beyond `threshold`, or an error rate above the baseline's by more than it."""
    cur = result_json(current) if isinstance(current, BenchResult) else current
    base_steps, changes = _steps(baseline), []
    for label, step in _steps(cur).items():
        old = base_steps.get(label)
        if old is None:
            continue
        for metric, higher_better in METRICS:
            a, b = _get(old, metric), _get(step, metric)
            if a is None or b is None or a == 0:
                continue
            rel = (b - a) / a
            worse = -rel if higher_better else rel
            changes.append(Change(label, metric, a, b, rel, worse > threshold))
        a, b = _get(old, "error_rate") or 0.0, _get(step, "error_rate") or 0.0
        changes.append(Change(label, "error_rate", a, b, b - a, b - a > threshold))
    return changes


def render_changes(changes: list[Change]) -> str:
    lines = []
    for c in changes:
        mark = "REGRESSION" if c.regression else "ok"
        lines.append(
            f"{c.step:<12} {c.metric:<18} {c.baseline:>12.4g} → {c.current:<12.4g} {c.change:+8.1%}  {mark}"
        )
    return "\n".join(lines)
