"""`python -m vtui.sim MODEL [vllm serve flags] [--sim-…]`."""

import sys

from vtui.sim.cli import run

raise SystemExit(run(sys.argv[1:]))
