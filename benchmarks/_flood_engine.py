"""A stand-in engine for bench_log_flood.py (a helper, not a benchmark): answers /health on its port and
writes FLOOD_RATE vLLM-like log lines a second to stdout (100 characters each), counting what it wrote
into FLOOD_COUNT_FILE once a second. Stdlib only. `_flood_engine.py MODEL --port P [flags…]`."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    rate = int(os.environ.get("FLOOD_RATE", "100000"))
    count_file = os.environ.get("FLOOD_COUNT_FILE")
    server = ThreadingHTTPServer((args.host, args.port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"INFO flood engine: serving {args.model} on {args.host}:{args.port}", flush=True)
    tick = 0.01
    per_tick = max(1, int(rate * tick))
    out = sys.stdout.buffer
    written, start, last_report = 0, time.monotonic(), 0.0
    stamp = "INFO 12-01 10:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
    while True:
        chunk = b"".join(f"{stamp}line {written + i:010d}\n".encode() for i in range(per_tick))
        out.write(chunk)
        out.flush()
        written += per_tick
        now = time.monotonic()
        if count_file and now - last_report >= 1.0:
            with open(count_file, "w") as f:
                f.write(f"{written} {now - start}\n")
            last_report = now
        ahead = start + written / rate - now
        if ahead > 0:
            time.sleep(ahead)


if __name__ == "__main__":
    main()
