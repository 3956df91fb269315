"""How long a big layout takes to load and to save (in place and as a new file), by size.

Generates layouts of N instances (each a few flags, one `${VAR}` reference, a comment) and times
`load_layout`, `save_layout` into the same file after one edit (the in-place tomlkit path) and into a new
file (the full rewrite), plus `vtui check`'s refusal of a file over the size limit.

    python benchmarks/bench_layout_size.py [--instances 100 1000 30000] [--shape instances|comment|list]

30000 instances, or --shape comment/list with 30000, is about 8 MB.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from pathlib import Path

import _smoke

from vtui.layouts import LayoutError, load_layout, save_layout

BLOCK = """
# instance {i}: a comment the in-place save keeps
[[instance]]
name = "inst-{i}"
engine = "sim"
model = "${{BENCH_MODEL}}"
port = {port}
gpus = [{gpu}]

[instance.flags]
max-num-seqs = {seqs}
max-model-len = 4096
gpu-memory-utilization = 0.5
served-model-name = "m{i}"
"""


def layout_text(count: int, shape: str = "instances") -> str:
    """`instances`: COUNT instance blocks (~0.26 KB each); `comment`: two instances and COUNT comment lines
    of ~0.26 KB; `list`: two instances, one with a `served-model-name` list of COUNT*26 names."""
    head = '[session]\nname = "big"\nallow_gpu_sharing = true\n'
    if shape == "instances":
        return head + "".join(
            BLOCK.format(i=i, port=1024 + i % 60000, gpu=i % 8, seqs=8 + i % 100) for i in range(count)
        )
    two = "".join(BLOCK.format(i=i, port=9000 + i, gpu=i, seqs=8) for i in range(2))
    if shape == "comment":
        return head + "".join(f"# {'x' * 250} {i}\n" for i in range(count)) + two
    names = ", ".join(f'"n{i}"' for i in range(count * 26))
    return head + two.replace('served-model-name = "m1"', f"served-model-name = [{names}]")


def measure(count: int, folder: Path, shape: str = "instances") -> dict[str, float]:
    path = folder / f"big-{shape}-{count}.toml"
    path.write_text(layout_text(count, shape), encoding="utf-8")
    size = path.stat().st_size
    t0 = time.perf_counter()
    try:
        layout = load_layout(path)
    except LayoutError as exc:
        print(f"  refused: {exc}")
        return {"count": count, "bytes": size, "refused_after_s": time.perf_counter() - t0}
    load_s = time.perf_counter() - t0
    first = layout.instances[0]
    edited = layout.replace_instance(first.with_flags({"max-num-seqs": 7}))
    t0 = time.perf_counter()
    save_layout(edited)
    in_place_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    save_layout(edited, folder / f"copy-{count}.toml")
    new_file_s = time.perf_counter() - t0
    return {
        "count": count,
        "bytes": size,
        "load_s": load_s,
        "save_in_place_s": in_place_s,
        "save_new_s": new_file_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, nargs="+", default=[100, 1000, 5000, 30000])
    parser.add_argument("--shape", choices=["instances", "comment", "list"], default="instances")
    parser.add_argument("--profile", type=int, default=0, help="profile one run of N instances")
    _smoke.tiny(parser, instances=[10])
    args = parser.parse_args()
    os.environ.setdefault("BENCH_MODEL", "org/model")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            measure(args.profile, folder, args.shape)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
            return
        for count in args.instances:
            row = measure(count, folder, args.shape)
            print(
                "  ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                flush=True,
            )


if __name__ == "__main__":
    main()
