"""What one scrape of the session's Prometheus endpoint costs the session supervisor: `render` of N
instances' last /metrics payloads (a real vLLM 0.32 payload, 51 KB) relabelled into one exposition,
against the supervisor's own once-a-second parse of the same payloads (`parse_metrics`). The render runs
on the supervisor's event loop once per Prometheus scrape (15 s by default), not once a second.

    python benchmarks/bench_exporter.py [--instances 8] [--repeat 50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import _smoke

from vtui.core.model import InstanceSpec
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.service.exporter import render
from vtui.telemetry.promtext import parse_metrics

PAYLOAD = Path(__file__).resolve().parent.parent / "tests" / "telemetry" / "fixtures" / "metrics_busy.txt"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=50)
    _smoke.tiny(parser, instances=1, repeat=1)
    args = parser.parse_args()
    payload = PAYLOAD.read_text()
    names = [f"i{n}" for n in range(args.instances)]
    statuses = [
        InstanceStatus(
            n,
            InstanceSpec(name=n, model="m", port=8000 + i),
            State.READY,
            None,
            None,
            None,
            0,
            None,
            None,
            False,
            None,
            None,
        )
        for i, n in enumerate(names)
    ]
    texts = dict.fromkeys(names, payload)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = render(statuses, texts, up=dict.fromkeys(names, True))
        times.append(time.perf_counter() - t0)
    parse = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for n in names:
            parse_metrics(texts[n])
        parse.append(time.perf_counter() - t0)
    print(
        f"payload {len(payload) / 1024:.0f} KiB × {args.instances} instances -> exposition {len(out) / 1024:.0f} KiB"
    )
    print(
        f"render: median {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms per scrape"
    )
    print(
        f"the supervisor's own parse of the same payloads: median {statistics.median(parse) * 1000:.1f} ms per second"
    )


if __name__ == "__main__":
    main()
