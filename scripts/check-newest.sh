#!/usr/bin/env bash
# Not run by CI: what the newest releases of everything would do, so that taking them is a deliberate
# commit (CONTRIBUTING.md, "Bumping a pin"). A throwaway venv ($VTUI_NEWEST_VENV, default .venv-newest,
# made afresh) gets vtui[test-core,lint] plus the snapshot plugin with no constraints and
# `--upgrade --upgrade-strategy eager`; then scripts/lint.sh and the suite without real vLLM, GPUs and the
# `alone` throughput comparisons (tests marked vllm, gpu, alone), on two workers. The snapshot tests are
# deselected unless textual and rich are still the test extra's pins (they are exact renderings).
# It prints each package whose version differs from constraints/ci.txt, and exits non-zero if lint or a
# test failed. Extra arguments go to pytest (e.g. a path, to run a subset).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VTUI_NEWEST_VENV:-$ROOT/.venv-newest}"
PY="${VTUI_PYTHON:-python3}"  # 3.11 or later (the version report reads pyproject.toml with tomllib)
say() { printf '[check-newest.sh] %s\n' "$*" >&2; }

rm -rf "$VENV"
"$PY" -m venv "$VENV" || exit 1
say "installing the newest releases into $VENV"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install --quiet --upgrade pip || exit 1
PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install --quiet --upgrade --upgrade-strategy eager \
    -e ".[test-core,lint]" pytest-textual-snapshot syrupy || exit 1

"$VENV/bin/python" - <<'PY'
import importlib.metadata, re, tomllib
pins = {}
for line in open("constraints/ci.txt"):
    m = re.match(r"([A-Za-z0-9._-]+)==(\S+)", line.strip())
    if m:
        pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]
for req in extra:
    m = re.match(r"(textual|rich)==(\S+)", req)
    if m:
        pins[m.group(1)] = m.group(2)
for name, pinned in sorted(pins.items()):
    try:
        have = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        have = "not installed"
    if have != pinned:
        print(f"[check-newest.sh] {name}: pinned {pinned}, newest {have}")
PY

VTUI_DEV_VENV="$VENV" "$ROOT/scripts/lint.sh"
lint=$?

same="$("$VENV/bin/python" - <<'PY'
import importlib.metadata, re, tomllib
extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]
pins = dict(re.match(r"(textual|rich)==(\S+)", r).groups() for r in extra if re.match(r"(textual|rich)==", r))
print(int(all(importlib.metadata.version(n) == v for n, v in pins.items())))
PY
)"
[[ "$same" == 1 ]] || export VTUI_NO_SNAPSHOTS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
"$VENV/bin/python" -m pytest -p no:cacheprovider -n "${VTUI_TEST_WORKERS:-2}" -q \
    -m "not vllm and not gpu and not alone" "$@"
tests=$?
say "lint: $([[ $lint == 0 ]] && echo passed || echo FAILED), tests: $([[ $tests == 0 ]] && echo passed || echo "FAILED ($tests)")"
[[ $lint == 0 && $tests == 0 ]]
