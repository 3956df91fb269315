"""What reading the installed vLLM's flags adds to `vtui check` / `vtui up`: a sim layout (no subprocess),
a vLLM layout on a cached version (one version probe in the instance's Python), and the first read of a
version (imports vLLM once). Usage: python benchmarks/flagschema_check_cost.py [VLLM]"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import _smoke

from vtui.telemetry import flagschema

LAYOUT = """[session]
name = "b"
[[instance]]
name = "a"
model = "m"
engine = "{engine}"
port = 8123
{command}
"""


def timed(path: Path) -> float:
    flagschema._MEMO.clear()
    started = time.perf_counter()
    flagschema.layout_schemas(path)
    return time.perf_counter() - started


def main() -> None:
    vllm = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("VTUI_VLLM", "")
    if _smoke.on() and len(sys.argv) <= 1:
        vllm = ""  # the sim layout only: a smoke run reads no real vLLM's flags
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_CACHE_HOME"] = tmp
        sim = Path(tmp) / "sim.toml"
        sim.write_text(LAYOUT.format(engine="sim", command=""))
        print(f"sim layout: {min(timed(sim) for _ in range(5)) * 1000:.2f} ms")
        if vllm:
            real = Path(tmp) / "vllm.toml"
            real.write_text(LAYOUT.format(engine="vllm", command=f'command = ["{vllm}", "serve"]'))
            print(f"vLLM layout, first read of the version: {timed(real):.1f} s")
            print(f"vLLM layout, cached version: {min(timed(real) for _ in range(3)) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
