"""Without an NVIDIA driver, the demo's GPU panel shows the simulated box its sim instances run on."""

from __future__ import annotations

import os

from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.sim.gpus import GpuRegistry
from vtui.sim.gpuview import GIB, simulated_sample
from vtui.ui.widgets.gpu_panel import gpu_text


def _layout(*specs: InstanceSpec, gib: float | None = None) -> Layout:
    return Layout(SessionSpec("s", gpu_memory_gib=gib), specs)


def test_sim_layout_shows_its_simulated_gpus_split_by_instance():
    GpuRegistry().claim(os.getpid(), [6], 36 * GIB)  # where the sims record what they hold
    layout = _layout(InstanceSpec("a", "m", 8001, engine="sim", gpus=(6,)), gib=80)
    sample = simulated_sample(layout, {os.getpid(): "a"})
    assert sample is not None and sample.available and len(sample.gpus) == 8
    assert sample.gpus[6].memory_used == 36 * GIB and sample.gpus[6].memory_total == 80 * GIB
    text = gpu_text(sample, ["a"], 100).plain
    assert "GPU6" in text and "SIM 80GB" in text and "36.0/ 80.0G" in text and "45%" in text
    assert "UTIL" in text and "simulated GPUs" in text  # utilization unknown: an empty bar and --


def test_sim_flags_size_the_box_and_real_vllm_layouts_have_none():
    big = _layout(
        InstanceSpec(
            "a", "m", 8001, engine="sim", gpus=(9,), flags={"sim-gpu-memory-gib": 141, "sim-num-gpus": 4}
        )
    )
    sample = simulated_sample(big, {})
    assert len(sample.gpus) == 10 and sample.gpus[0].memory_total == 141 * GIB
    assert simulated_sample(_layout(InstanceSpec("v", "m", 8001)), {}) is None
