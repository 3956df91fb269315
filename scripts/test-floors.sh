#!/usr/bin/env bash
# The tests at the floors: vtui's runtime dependencies at the lowest versions pyproject.toml's
# [project].dependencies allows (scripts/floors.py turns each `>=X` into a `==X` constraint; what they
# bring in resolves to its newest), the test tools at constraints/ci.txt, in a venv of its own
# ($VTUI_FLOORS_VENV, default .venv-floors). scripts/test.sh runs it after the main suite, which takes the
# newest releases: between them, each dependency's both ends (tomlkit's included, for tests/layout).
#   ./scripts/test-floors.sh              (extra arguments go to pytest)
# It runs the unit, layout and UI tests on two workers; the snapshot tests are deselected (exact
# renderings of the textual and rich pinned in the test extra), as are those marked vllm, gpu or alone.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VTUI_FLOORS_VENV:-$ROOT/.venv-floors}"
PY="${VTUI_DEV_VENV:-$ROOT/.venv}/bin/python"  # the project venv's interpreter (scripts/test.sh made it)
[[ -x "$PY" ]] || PY=python3
say() { printf '[test-floors.sh] %s\n' "$*" >&2; }

[[ -x "$VENV/bin/python" ]] || { say "creating $VENV"; "$PY" -m venv "$VENV"; }
floors="$VENV/floors.txt"
"$PY" scripts/floors.py > "$floors.new" && mv "$floors.new" "$floors"
want="$(cat pyproject.toml constraints/ci.txt | sha256sum | cut -c1-16) $ROOT"
stamp="$VENV/.vtui-floors-install"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    say "installing vtui[test-core] at the floors into $VENV"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install --quiet \
        -c constraints/ci.txt -c "$floors" -e ".[test-core]"
    echo "$want" > "$stamp"
fi
# what was installed is the floors, or this run proves nothing
"$VENV/bin/python" - "$floors" <<'PY'
import importlib.metadata, sys
from packaging.requirements import Requirement
from packaging.version import Version
wrong, shown = [], []
for line in open(sys.argv[1]):
    req = Requirement(line.strip())
    if req.marker is not None and not req.marker.evaluate():
        continue
    want = Version(next(iter(req.specifier)).version)
    have = importlib.metadata.version(req.name)
    shown.append(f"{req.name} {have}")
    if Version(have) != want:
        wrong.append(f"{req.name} {have} (floor {want})")
print("[test-floors.sh] at the floors: " + ", ".join(shown), file=sys.stderr)
sys.exit(f"not at the floors: {', '.join(wrong)}" if wrong else 0)
PY

export VTUI_NO_SNAPSHOTS=1
workers="${VTUI_TEST_WORKERS:-2}"
args=(-p no:cacheprovider -m "not vllm and not gpu and not alone")
[[ "$workers" == 0 ]] || args+=(-n "$workers")
# The import-linter contract is a static check of vtui's own imports (scripts/lint.sh runs it, and the main
# run's test): the floors venv has no checkers, and the dependencies' versions cannot change its answer.
exec "$VENV/bin/python" -m pytest "${args[@]}" "$@" \
    --deselect tests/test_architecture.py::test_import_linter_contract \
    tests/test_dependencies.py tests/test_architecture.py tests/layout tests/core tests/ui
