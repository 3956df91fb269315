#!/usr/bin/env bash
# GPU acceptance run on a machine with NVIDIA GPUs (the device machine), from the repository root: installs
# the carried wheels (.whl/*.whl, vtui's dependencies for Python 3.12, into $VTUI_SITE), prints the
# environment, runs the `gpu` tests through benchmarks/bench_gpu.py within a time budget, and shows that
# nothing is left on the GPUs. Everything it makes goes to $OUT: gpu-figures.json, the screenshots
# (screenshot-gpu-table.svg/.txt: the dashboard's GPU panel through the session supervisor;
# screenshot-gpu.svg/.txt: the dashboard split by instance).
# The device machine has torch, pynvml, httpx, h11, psutil and pytest but nothing can be installed there
# from an index: make the wheels here first (.whl is in .gitignore; carry it to the device), e.g.
#   pip download -d .whl --only-binary=:all: --no-deps --python-version 3.12 \
#     --platform manylinux2014_x86_64 textual==8.2.8 rich==15.0.0 textual-plotext==1.0.1 plotext==5.3.2 \
#     tomli-w tomlkit orjson pytest-asyncio platformdirs markdown-it-py mdit-py-plugins mdurl \
#     linkify-it-py uc-micro-py
#   VTUI_GPU_BUDGET_S  seconds the tests may take in all (default 360; then they are interrupted)
#   VTUI_GPU_DRY=1     rehearse on a machine without a GPU (tests/gpu/conftest.py: the simulated registry)
set -u
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID VTUI_GPU_ARTIFACTS="$OUT"
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1  # only the plugins the tests need (bench_gpu.py loads them)
PY=${PYTHON:-python3}
SITE=${VTUI_SITE:-/tmp/site}
if compgen -G ".whl/*.whl" >/dev/null; then
    echo "== wheels"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
        || { echo "installing the carried wheels failed"; exit 1; }
    ls .whl
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"

echo "== machine"; uname -r; nproc; "$PY" --version
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.used,memory.total,driver_version --format=csv
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
echo "== modules"
"$PY" - <<'PY' || exit 1
import importlib, os
dry = os.environ.get("VTUI_GPU_DRY") == "1"
for name in ("torch", "pynvml", "psutil", "httpx", "anyio", "h11", "textual", "textual_plotext", "rich",
             "tomli_w", "tomlkit", "pytest", "pytest_asyncio", "pytest_timeout", "vtui"):
    try:
        mod = importlib.import_module(name)
    except ImportError as exc:
        if dry and name == "torch":
            print(f"{name:15} missing (dry run)")
            continue
        raise SystemExit(f"{name}: {exc}")
    print(f"{name:15} {getattr(mod, '__version__', '?'):12} {getattr(mod, '__file__', '')}")
if not dry:
    import torch
    print("torch.cuda:", torch.cuda.is_available(), torch.cuda.device_count(), torch.version.cuda)
PY
echo "== tests"
start=$(date +%s)
"$PY" benchmarks/bench_gpu.py --budget "${VTUI_GPU_BUDGET_S:-360}" --durations=0
code=$?
echo "== tests took $(( $(date +%s) - start )) s, exit $code"
echo "== left on the GPUs (should be no compute apps)"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
nvidia-smi --query-gpu=index,memory.used,memory.total,utilization.gpu --format=csv
# A zombie (state Z: exited, never reaped, e.g. an orphaned VLLM::EngineCore where init does not reap)
# holds no memory: named apart, with its pid, name and state, not listed as left running. The tests'
# own leak check (tests/conftest.py, through _support.procs.left_behind) treats zombies the same way.
ps -eo pid,ppid,stat,comm,args | awk '
    NR > 1 && /vtui|VLLM/ && !/awk/ {
        if ($3 ~ /^Z/) zombies = zombies sprintf("  %s %s (state %s)\n", $1, $4, $3)
        else live = live $0 "\n"
    }
    END {
        printf "%s", (live != "" ? live : "no vtui/VLLM processes\n")
        if (zombies != "") printf "zombies (not leaks: they hold nothing):\n%s", zombies
    }'
ls -la "$OUT"
exit $code
