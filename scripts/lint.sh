#!/usr/bin/env bash
# The static checks CI runs before the tests: ruff (lint + format), the layering contract, mypy.
#   ./scripts/lint.sh            (uses the project venv made by scripts/test.sh, or $VTUI_DEV_VENV)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BIN="${VTUI_DEV_VENV:-$ROOT/.venv}/bin"
say() { printf '[lint.sh] %s\n' "$*" >&2; }
say "ruff check";          "$BIN/ruff" check vtui tests benchmarks scripts
say "ruff format --check"; "$BIN/ruff" format --check --quiet vtui tests benchmarks scripts
say "import-linter";       "$BIN/lint-imports" --no-cache >/dev/null
say "mypy (--strict for the packages of [tool.mypy.overrides])"; "$BIN/mypy"
