"""`python -m vtui.supervisor.routerproc ARGS`: vllm-router (the Rust router its wheel ships as the
`vllm_router_rs` module) with the `vllm-router` command line. Not its console script: that one calls
setproctitle, which rewrites the command line and the environment that re-adoption and the sweep's
`VTUI_INSTANCE` marker read; nor its launcher module, which imports the Python MiniLB (FastAPI, aiohttp).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    try:
        from vllm_router.router import Router
        from vllm_router.router_args import RouterArgs
    except ImportError as exc:
        print(
            f"vtui: vllm-router is not installed ({exc}); pip install 'vtui[router]' (or vllm-router)",
            file=sys.stderr,
        )
        return 2
    parser = argparse.ArgumentParser(prog="vllm-router (vtui)")
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    args = RouterArgs.from_cli_args(parser.parse_args(argv), use_router_prefix=False)
    args._validate_router_args()
    Router.from_args(args).start()  # blocks until the server ends
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
