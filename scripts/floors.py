"""Print a pip constraints file pinning each of vtui's runtime dependencies to its floor (the lowest
version pyproject.toml's [project].dependencies allows): `name==X` for `name>=X`, markers kept.
Used by scripts/test-floors.sh; fails on a dependency without a `>=` floor."""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def floors(dependencies: list[str]) -> list[str]:
    lines = []
    for requirement in dependencies:
        spec, _, marker = requirement.partition(";")
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$", spec)
        floor = re.search(r">=\s*([^\s,]+)", match.group(2)) if match else None
        if match is None or floor is None:
            raise SystemExit(f"floors.py: {requirement!r} has no `>=` floor")
        lines.append(f"{match.group(1)}=={floor.group(1)}" + (f"; {marker.strip()}" if marker else ""))
    return lines


if __name__ == "__main__":
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    sys.stdout.write("".join(line + "\n" for line in floors(project["dependencies"])))
