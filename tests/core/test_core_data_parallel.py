"""Data parallel: the GPU count counts the ranks (tensor × pipeline × data-parallel ranks on this node),
and preflight knows the extra ports of --data-parallel-multi-port-external-lb (a port per local rank and
the DP supervisor's, 9256 by default, which serves /readyz: vLLM 0.32's
vllm/entrypoints/launchers/dp_supervisor.py and FrontendArgs.data_parallel_supervisor_port)."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest

from vtui.core.flagspec import BUILTIN_FLAGS, gpus_needed
from vtui.core.flagvalues import DP_SUPERVISOR_PORT, dp_ports
from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.layouts import LayoutError, load_layout
from vtui.supervisor.preflight import preflight

from .conftest import free_port

MULTI = {"data-parallel-size": 2, "data-parallel-size-local": 2, "data-parallel-multi-port-external-lb": True}


def test_the_supervisor_default_is_vllms() -> None:
    assert BUILTIN_FLAGS["data-parallel-supervisor-port"].default == DP_SUPERVISOR_PORT == 9256


def test_gpus_needed_counts_the_data_parallel_ranks() -> None:
    assert gpus_needed({}) == (1, "tensor-parallel-size × pipeline-parallel-size")
    assert gpus_needed({"data-parallel-size": 2})[0] == 2
    assert gpus_needed({"data-parallel-size": 2, "tensor-parallel-size": 2})[0] == 4
    # a node running 2 of 4 ranks (multi-node) uses 2 × TP GPUs here
    assert gpus_needed({"data-parallel-size": 4, "data-parallel-size-local": 2}) == (
        2,
        "tensor-parallel-size × pipeline-parallel-size × data-parallel-size-local",
    )
    assert gpus_needed({"data-parallel-size": "${DP}"}) is None


def _layout(tmp_path: Path, flags: str, gpus: str) -> Path:
    path = tmp_path / "dp.toml"
    path.write_text(
        textwrap.dedent(
            f"""\
            [session]
            name = "dp"
            [[instance]]
            name = "a"
            model = "m"
            port = 8100
            gpus = {gpus}
            [instance.flags]
            {flags}
            """
        )
    )
    return path


def test_dp_2_on_2_gpus_is_accepted(tmp_path: Path) -> None:
    layout = load_layout(_layout(tmp_path, "data-parallel-size = 2", "[0, 1]"))
    assert layout.instances[0].flags["data-parallel-size"] == 2


def test_dp_2_on_1_gpu_is_refused_naming_the_formula(tmp_path: Path) -> None:
    with pytest.raises(LayoutError) as caught:
        load_layout(_layout(tmp_path, "data-parallel-size = 2\ntensor-parallel-size = 2", "[0, 1]"))
    assert (
        "tensor-parallel-size × pipeline-parallel-size × data-parallel-size = 4, but 2 GPU(s) listed"
        in str(caught.value)
    )


def test_dp_ports() -> None:
    assert dp_ports({"data-parallel-size": 2}, 8000) == ((8000,), None)  # internal LB: one API port
    assert dp_ports(MULTI, 8000) == ((8000, 8001), 9256)
    assert dp_ports({**MULTI, "data-parallel-supervisor-port": 9300}, 8000)[1] == 9300


def test_preflight_refuses_a_taken_rank_or_supervisor_port() -> None:
    port = free_port()
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", port + 1))
        held.listen()
        supervisor = free_port()
        flags = {**MULTI, "data-parallel-supervisor-port": supervisor}
        spec = InstanceSpec(name="dp", model="m", port=port, gpus=(0, 1), flags=flags)
        result = preflight(Layout(SessionSpec(name="s"), (spec,)), nvml=None, cpu_count=64)
    assert [p for p in result.problems if "data-parallel" in p] == [
        f'instance "dp": port {port + 1} (data-parallel rank 1) is already in use '
        + result.problems[0].split("already in use ", 1)[1]
    ]


def test_preflight_refuses_a_rank_port_that_is_another_instances() -> None:
    port = free_port()
    dp = InstanceSpec(
        name="dp",
        model="m",
        port=port,
        gpus=(0, 1),
        flags={**MULTI, "data-parallel-supervisor-port": free_port()},
    )
    other = InstanceSpec(name="other", model="m", port=port + 1, gpus=(2,))
    result = preflight(Layout(SessionSpec(name="s"), (dp, other)), nvml=None, cpu_count=64)
    assert (
        f'instance "dp": port {port + 1} (data-parallel rank 1) is also instance "other"\'s'
        in result.problems
    )


def test_gpus_and_device_ids_together_are_refused() -> None:
    spec = InstanceSpec(name="x", model="m", port=free_port(), gpus=(2, 3), flags={"device-ids": "2,3"})
    result = preflight(Layout(SessionSpec(name="s"), (spec,)), nvml=None, cpu_count=64)
    assert any("sets both gpus" in p and "device-ids" in p for p in result.problems)
    alone = InstanceSpec(name="y", model="m", port=free_port(), flags={"device-ids": "2,3"})
    assert not preflight(Layout(SessionSpec(name="s"), (alone,)), nvml=None, cpu_count=64).problems
