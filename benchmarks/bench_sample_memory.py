"""What a dashboard's metrics history costs in memory: N instances' plots (600 samples each, 10 minutes at
1 Hz, plus the hour-long history's one per 10 s), filled as a dashboard fills them — each sample decoded
from its own feed line (the supervisor's JSON, orjson on the dashboard's side) and added to the store.

Run it from a checkout (it imports the `vtui` of the current directory), so an older commit's figure is
`cd OTHER_CHECKOUT && python /path/to/bench_sample_memory.py`:

    python benchmarks/bench_sample_memory.py                 # 8 and 32 instances, idle and busy
    python benchmarks/bench_sample_memory.py --instances 32 --json

Busy samples come from a payload with TTFT and ITL histograms (their windowed bucket counts are in each
sample), idle ones from a server that served nothing. Each sample gets its own `at` and counters, so
nothing is shared that a real feed would not share. The figure is tracemalloc's: Python objects only,
the bytes the history holds once filled (RSS adds the allocator's slack on top).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
from pathlib import Path

import _smoke

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "telemetry" / "fixtures"


def measure(instances: int, kind: str, per_instance: int) -> dict[str, float]:
    sys.path.insert(0, str(Path.cwd()))
    from vtui.core.model import InstanceSpec, Layout, SessionSpec
    from vtui.service.wire import decode_sample, encode_sample

    try:
        from vtui.service.wire import loads  # the feed's codec (orjson), where the checkout has one
    except ImportError:
        from json import loads
    from vtui.telemetry.metrics import sample_of
    from vtui.ui.store import Store

    text = (FIXTURES / f"metrics_{kind}.txt").read_text()
    base = encode_sample(sample_of(text, "x", 0.0))
    specs = tuple(InstanceSpec(f"inst-{i:02d}", "m", 9000 + i, engine="sim") for i in range(instances))
    store = Store(Layout(SessionSpec("bench"), specs))
    lines = []
    for i in range(per_instance):  # one feed line per sample, fresh floats in each (as the feed has)
        data = dict(base, at=1000.0 + i)
        for key in ("prompt_tokens_total", "generation_tokens_total", "generation_tps", "prompt_tps"):
            if data.get(key) is not None:
                data[key] = float(data[key]) + i * 0.5
        lines.append(json.dumps({"type": "sample", "sample": data}).encode())
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for spec in specs:
        for line in lines:
            data = loads(line)["sample"]
            data["instance"] = spec.name
            store.add_sample(decode_sample(data))
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    samples = instances * per_instance
    return {
        "instances": instances,
        "kind": kind,
        "samples": samples,
        "bytes_per_sample": round(held / samples, 1),
        "held_mb": round(held / 1e6, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, nargs="*", default=[8, 32])
    parser.add_argument("--samples", type=int, default=600, help="per instance (the store keeps 600)")
    parser.add_argument("--json", action="store_true")
    _smoke.tiny(parser, instances=[1], samples=10)
    args = parser.parse_args()
    rows = [measure(n, kind, args.samples) for n in args.instances for kind in ("idle", "busy")]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'instances':>9} {'kind':>5} {'samples':>8} {'B/sample':>9} {'held MB':>8}")
        for r in rows:
            print(
                f"{r['instances']:>9} {r['kind']:>5} {r['samples']:>8} {r['bytes_per_sample']:>9} {r['held_mb']:>8}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
