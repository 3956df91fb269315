"""Saving a commented layout in place: how long a save takes, and where tomlkit's public API alone would
put a new flag (the choice behind vtui.layouts.edit's placement of new keys).

For N instances (each with a heading comment, a commented [instance.flags] table and a trailing comment
that leads into the next instance) it times `save_layout` for: a changed flag, an added flag, an added
[instance.flags] table, a removed instance. It also counts, for the added flag, whether the new line
lands right below the table's last key (vtui's placement) or after the comments that lead into the next
instance (what `table[key] = value` alone does), with the installed tomlkit.

    python benchmarks/bench_layout_save.py [--instances 4,32] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import _smoke
import tomlkit

from vtui.layouts import load_layout, save_layout


def layout_text(n: int) -> str:
    lines = ["# a box of many models: keep these notes", "[session]", 'name = "bench"', ""]
    for i in range(n):
        lines += [
            f"# --- instance {i}: what it is for ---",
            "[[instance]]",
            f'name = "m{i}"   # the name vtui shows',
            'model = "org/model"',
            'engine = "sim"',
            f"port = {9000 + i}",
        ]
        if i % 2 == 0:
            lines += ["[instance.flags]", "max-num-seqs = 64   # tuned", "# more notes on the flags"]
        lines += ["# end of this instance's notes", ""]
    return "\n".join(lines) + "\n"


def timed(path: Path, text: str, edit, repeat: int) -> float:
    """Median ms of one save_layout of `edit(layout)` into a fresh copy of `text`."""
    times = []
    for _ in range(repeat):
        path.write_text(text, encoding="utf-8")
        layout = edit(load_layout(path))
        t0 = time.perf_counter()
        save_layout(layout)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def public_api_placement(text: str) -> str:
    """The line tomlkit's public `t[k] = v` writes a new flag of instance 0 below."""
    doc = tomlkit.parse(text)
    doc["instance"][0]["flags"]["seed"] = 1
    out = tomlkit.dumps(doc).splitlines()
    return out[out.index("seed = 1") - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", default="4,32")
    parser.add_argument("--repeat", type=int, default=20)
    _smoke.tiny(parser, instances="2", repeat=1)
    args = parser.parse_args()
    sizes = [int(n) for n in args.instances.split(",")]
    repeat = args.repeat
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.toml"
        for n in sizes:
            text = layout_text(n)

            def change(layout):
                return layout.replace_instance(layout.instance("m0").with_flags({"max-num-seqs": 32}))

            def add(layout):
                return layout.replace_instance(layout.instance("m0").with_flags({"seed": 1}))

            def add_table(layout):
                return layout.replace_instance(layout.instance("m1").with_flags({"seed": 1}))

            def drop(layout):
                return replace(layout, instances=layout.instances[1:])

            row = {
                "instances": n,
                "bytes": len(text),
                "change_ms": timed(path, text, change, repeat),
                "add_flag_ms": timed(path, text, add, repeat),
                "add_table_ms": timed(path, text, add_table, repeat),
                "drop_instance_ms": timed(path, text, drop, repeat),
            }
            path.write_text(text, encoding="utf-8")
            layout = load_layout(path)
            save_layout(add(layout))
            saved = path.read_text(encoding="utf-8").splitlines()
            comments = [line for line in text.splitlines() if line.startswith("#")]
            row["comments_kept"] = f"{sum(c in saved for c in comments)}/{len(comments)}"
            row["vtui_new_key_below"] = saved[saved.index("seed = 1") - 1]
            row["public_api_new_key_below"] = public_api_placement(text)
            results.append(row)
    print(
        json.dumps(
            {"tomlkit": tomlkit.__version__, "python": sys.version.split()[0], "runs": results}, indent=2
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
