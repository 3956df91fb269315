"""Presets set --performance-mode where the instance's vLLM has it (0.32's VllmConfig.performance_mode:
balanced / interactivity / throughput), and leave it out for a vLLM without it."""

from __future__ import annotations

from dataclasses import replace

from vtui.core.flagspec import BUILTIN_FLAGS
from vtui.sim.args import parse
from vtui.ui.presets import preset_flags


def test_presets_choose_a_performance_mode(layout) -> None:
    spec = layout.instances[0]
    assert BUILTIN_FLAGS["performance-mode"].choices == ("balanced", "interactivity", "throughput")
    assert preset_flags("A", spec)["performance-mode"] == "throughput"
    assert preset_flags("B", spec)["performance-mode"] == "interactivity"


def test_no_performance_mode_where_the_vllm_lacks_it(layout) -> None:
    spec = replace(layout.instances[0], engine="vllm", command=("/opt/old/bin/vllm", "serve"))
    older = {k: v for k, v in BUILTIN_FLAGS.items() if k != "performance-mode"}
    assert "performance-mode" not in preset_flags("A", spec, table=older)


def test_the_sim_takes_the_flag() -> None:
    args = parse(["some/model", "--performance-mode", "throughput"])
    assert args is not None
