"""Which environment variables pin an instance to its GPUs, per backend (the layout's `backend` key).

Each is the variable the vLLM build of that platform reads (its `Platform.device_control_env_var`, or
the runtime's own filter below it):

- `cuda`: CUDA_VISIBLE_DEVICES, with CUDA_DEVICE_ORDER=PCI_BUS_ID so the indices are nvidia-smi's.
- `rocm`: HIP_VISIBLE_DEVICES, and CUDA_VISIBLE_DEVICES with the same value: vLLM's ROCm platform reads
  CUDA_VISIBLE_DEVICES and refuses a HIP_VISIBLE_DEVICES that differs from it. Not ROCR_VISIBLE_DEVICES
  as well: it filters below HIP, so HIP would number the GPUs it leaves from 0 and the same indices
  would then pick other GPUs. A layout that wants ROCR's filter sets it in `env` and no `gpus`.
- `xpu` (Intel): ZE_AFFINITY_MASK.
- `tpu`: TPU_VISIBLE_CHIPS (a subset of a host's chips also needs the runtime's process bounds,
  TPU_CHIPS_PER_PROCESS_BOUNDS / TPU_PROCESS_BOUNDS, set in `env`).
- `ascend` (vllm-ascend): ASCEND_RT_VISIBLE_DEVICES.
- `cpu`: none (a CPU build has no GPUs to pin).

Only `cuda` runs in vtui's tests on real devices; the others are set as their platforms document them.
Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

BACKENDS: Mapping[str, tuple[str, ...]] = {
    "cuda": ("CUDA_VISIBLE_DEVICES",),
    "rocm": ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    "xpu": ("ZE_AFFINITY_MASK",),
    "tpu": ("TPU_VISIBLE_CHIPS",),
    "ascend": ("ASCEND_RT_VISIBLE_DEVICES",),
    "cpu": (),
}
DEFAULT_BACKEND = "cuda"
# set beside the pinning whatever the GPUs (indices as nvidia-smi numbers them)
ORDER: Mapping[str, Mapping[str, str]] = {"cuda": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}}
ALL_PIN_VARS = tuple(dict.fromkeys(v for names in BACKENDS.values() for v in names))


def pin_vars(backend: str) -> tuple[str, ...]:
    """The variables that pin `backend`'s devices (the first: the one to read a pinning back from)."""
    return BACKENDS.get(backend, BACKENDS[DEFAULT_BACKEND])


def pinning_env(backend: str, gpus: Sequence[int]) -> dict[str, str]:
    """The environment an instance of `backend` on `gpus` gets (nothing to pin without gpus)."""
    env = dict(ORDER.get(backend, {}))
    if gpus:
        value = ",".join(str(g) for g in gpus)
        env.update(dict.fromkeys(pin_vars(backend), value))
    return env


def pinned_by_env(backend: str, env: Mapping[str, str]) -> list[str] | None:
    """The devices a layout's own `env` pins for `backend` (its first pinning variable), else None."""
    for var in pin_vars(backend)[:1]:
        if var in env:
            return [g.strip() for g in env[var].split(",") if g.strip()]
    return None
