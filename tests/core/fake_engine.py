"""A stand-in for `vllm serve` in supervisor tests: stdlib only, starts in a fraction of a second.

`fake_engine.py MODEL --host H --port P [options]`, options written as layout flags:
  --startup-delay S      seconds before binding the port (vLLM binds late)
  --fail-startup MSG     print a vLLM-style error and exit 1 instead of serving
  --ignore-sigterm       hang on SIGTERM (vLLM with open streams)
  --spawn-child          start a child titled `VLLM::EngineCore` that survives a SIGKILL of this process
  --chatty BYTES         write this many bytes of log lines at start
  --unhealthy-file F     /health answers 503 while F exists
  --exit-after S         exit 0 after S seconds of serving
Also from the environment (layouts may hold only real vllm flags): FAKE_STARTUP_DELAY, FAKE_FAIL_STARTUP,
FAKE_IGNORE_SIGTERM=1, FAKE_SPAWN_CHILD=1. Unknown (real vLLM) flags are accepted and echoed.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _set_name(name: bytes) -> None:
    try:
        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name[:15]), 0, 0, 0)  # PR_SET_NAME
    except (AttributeError, OSError):  # no prctl (not Linux), no libc handle: the name stays
        pass


def child_main() -> None:
    _set_name(b"VLLM::EngineCore")
    print("(EngineCore) INFO CPU KV cache size: 4,096 tokens", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(1)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child_main()
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--startup-delay", type=float, default=0.0)
    parser.add_argument("--fail-startup")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--spawn-child", action="store_true")
    parser.add_argument("--chatty", type=int, default=0)
    parser.add_argument("--unhealthy-file")
    parser.add_argument("--exit-after", type=float)
    args, extra = parser.parse_known_args()  # real vllm flags (e.g. --max-num-seqs) are accepted
    env = os.environ  # a layout can only carry real vllm flags: behaviour also comes from FAKE_* vars
    args.startup_delay = float(env.get("FAKE_STARTUP_DELAY", args.startup_delay))
    args.fail_startup = env.get("FAKE_FAIL_STARTUP", args.fail_startup)
    args.ignore_sigterm = args.ignore_sigterm or env.get("FAKE_IGNORE_SIGTERM") == "1"
    args.spawn_child = args.spawn_child or env.get("FAKE_SPAWN_CHILD") == "1"
    print(
        f"(APIServer pid={os.getpid()}) INFO non-default args: model={args.model} {' '.join(extra)}",
        flush=True,
    )
    if args.chatty:
        line = "x" * 99 + "\n"
        for _ in range(args.chatty // 100):
            sys.stdout.write(line)
        sys.stdout.flush()
    child = None
    if args.spawn_child:
        # FAKE_CHILD_NO_ENV=1: an empty environ, as vLLM's setproctitle leaves /proc/PID/environ.
        child_env = {} if env.get("FAKE_CHILD_NO_ENV") == "1" else None
        child = subprocess.Popen(
            ["VLLM::EngineCore", os.path.abspath(__file__), "--child"],
            executable=sys.executable,
            env=child_env,
        )
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:

        def on_term(*_: object) -> None:
            if child is not None:
                child.terminate()
                child.wait()
            print("INFO Shutting down", flush=True)
            os._exit(0)

        signal.signal(signal.SIGTERM, on_term)
    print("INFO Loading weights took 0.01 GiB", flush=True)
    time.sleep(args.startup_delay)
    if args.fail_startup:
        print(f"ERROR Traceback follows\nValueError: {args.fail_startup}", file=sys.stderr, flush=True)
        if child is not None:
            child.kill()
        sys.exit(1)
    print("INFO CPU KV cache size: 4,096 tokens", flush=True)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            sick = args.unhealthy_file and os.path.exists(args.unhealthy_file)
            code = 503 if sick or self.path != "/health" else 200
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"INFO Starting vLLM API server on http://{args.host}:{args.port}", flush=True)
    if args.exit_after is not None:
        threading.Timer(args.exit_after, lambda: os._exit(0)).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
