#!/usr/bin/env bash
# GPU acceptance run on a machine with NVIDIA GPUs (the device machine): environment facts, the `gpu`
# tests through benchmarks/bench_gpu.py, and proof that nothing is left on the GPUs. Writes to $OUT.
# Expects PYTHONPATH to hold vtui's dependencies (the device command installs the carried wheels first).
set -u
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID VTUI_GPU_ARTIFACTS="$OUT"
export PYTHONPATH="${PYTHONPATH:-}:$PWD"

echo "== machine"; uname -r; nproc; python3 --version
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.used,memory.total,driver_version --format=csv
echo "== modules"
python3 - <<'PY' || exit 1
import importlib
for name in ("torch", "pynvml", "psutil", "httpx", "anyio", "h11", "textual", "rich", "tomli_w", "pytest",
             "pytest_asyncio", "pytest_timeout", "vtui"):
    mod = importlib.import_module(name)
    print(f"{name:15} {getattr(mod, '__version__', '?'):12} {getattr(mod, '__file__', '')}")
import torch
print("torch.cuda:", torch.cuda.is_available(), torch.cuda.device_count(), torch.version.cuda)
PY
echo "== tests"
start=$(date +%s)
python3 benchmarks/bench_gpu.py --timeout=600 --durations=0 --maxfail=3
code=$?
echo "== tests took $(( $(date +%s) - start )) s, exit $code"
echo "== left on the GPUs (should be no compute apps)"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
nvidia-smi --query-gpu=index,memory.used,memory.total,utilization.gpu --format=csv
ps -eo pid,ppid,comm,args | grep -E "vtui|VLLM" | grep -v grep || echo "no vtui/VLLM processes"
exit $code
