"""The feed's JSON codec (`vtui.service.wire.loads` / `feed_line`, orjson) against the standard library's
`json`, on lines read from a running session supervisor's feed (`vtui up LAYOUT` first; the session's
name is its `[session] name`) for `--seconds`: microseconds per line to decode (the dashboard's side)
and to encode (the supervisor's), by message type.

    python benchmarks/bench_ui_feed_codec.py SESSION --seconds 5

Measured on 8 `vtui sim` instances (bench_ui_vs_htop.py's layout; 117 lines in 6 s: 48 samples of
1.4 kB, 64 log-line events of 0.2 kB, 5 GPU samples of 2.1 kB; the best of 5 passes, on a shared 2-core
machine at load 6): decode json 41.9 us/line, orjson 3.7; encode json 56.9 us/line, orjson 5.3. At the
17.6 lines/s the dashboard reads at 8 instances (bench_ui_breakdown.py), the decode is some 0.7 ms of
CPU per second with json (0.82 ms/s measured there, wrapped), 0.06 with orjson.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _smoke

from vtui.service import locations
from vtui.service.wire import feed_line, loads


def read_feed(session: str, seconds: float) -> list[bytes]:
    """The feed's lines (after the hello) for `seconds`, raw."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(locations.socket_path(session)))
    sock.sendall(b"GET /feed HTTP/1.1\r\nHost: localhost\r\n\r\n")
    sock.settimeout(0.2)
    data, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            data += sock.recv(1 << 16)
        except TimeoutError:
            continue
    sock.close()
    body = data.partition(b"\r\n\r\n")[2]
    lines = [line for line in body.split(b"\n") if line.startswith(b"{")]  # chunk sizes left out
    return lines[1:]


def per_line_us(fn, items: list, repeat: int) -> float:
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeat):
            for item in items:
                fn(item)
        best.append((time.perf_counter() - t0) / repeat / len(items) * 1e6)
    return round(min(best), 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # a smoke run without a session: a one-sim session of its own (_smoke.sim_session)
    parser.add_argument("session", nargs="?" if _smoke.on() else None)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=50)
    _smoke.tiny(parser, seconds=1.5, repeat=1)
    args = parser.parse_args()
    if args.session is None:
        with _smoke.sim_session() as (args.session, _):
            lines = read_feed(args.session, args.seconds)
    else:
        lines = read_feed(args.session, args.seconds)
    if not lines:
        print(f"no feed lines from session {args.session!r}", file=sys.stderr)
        return 2
    messages = [json.loads(line) for line in lines]
    kinds: dict[str, list[int]] = {}
    for line, message in zip(lines, messages, strict=True):
        kinds.setdefault(message.get("type", "?"), []).append(len(line))
    std_encode = lambda m: (json.dumps(m, separators=(",", ":")) + "\n").encode()  # noqa: E731
    result = {
        "lines": len(lines),
        "lines_per_s": round(len(lines) / args.seconds, 1),
        "by_type": {k: {"lines": len(v), "mean_bytes": round(statistics.mean(v))} for k, v in kinds.items()},
        "decode_us_per_line": {
            "json": per_line_us(json.loads, lines, args.repeat),
            "wire.loads (orjson)": per_line_us(loads, lines, args.repeat),
        },
        "encode_us_per_line": {
            "json": per_line_us(std_encode, messages, args.repeat),
            "wire.feed_line (orjson)": per_line_us(feed_line, messages, args.repeat),
        },
    }
    assert all(loads(feed_line(m)) == m for m in messages)  # the same messages either way
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
