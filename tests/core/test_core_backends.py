"""GPU pinning per backend: the layout's `backend` key picks the variables an instance's `gpus` are set in
(core.backends), in the child's environment, the copyable command line, the exports and the start order."""

from __future__ import annotations

import pytest

from vtui.core.backends import BACKENDS, pinning_env
from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.runstate import spec_from_dict, spec_to_dict
from vtui.layouts.errors import LayoutError
from vtui.layouts.files import load_layout
from vtui.supervisor.supervision import gpus_used

EXPECTED = {
    "cuda": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "2,3"},
    "rocm": {"HIP_VISIBLE_DEVICES": "2,3", "CUDA_VISIBLE_DEVICES": "2,3"},
    "xpu": {"ZE_AFFINITY_MASK": "2,3"},
    "tpu": {"TPU_VISIBLE_CHIPS": "2,3"},
    "ascend": {"ASCEND_RT_VISIBLE_DEVICES": "2,3"},
    "cpu": {},
}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_each_backend_pins_with_its_own_variables(backend: str) -> None:
    spec = InstanceSpec(name="a", model="m", port=8000, gpus=(2, 3), backend=backend)
    env = spec.process_env(base={})
    assert {k: v for k, v in env.items() if k != "VLLM_API_KEY"} == EXPECTED[backend]
    for var, value in EXPECTED[backend].items():
        assert f"{var}={value}" in spec.command_line()
    others = {v for b, names in BACKENDS.items() if b != backend for v in names} - set(EXPECTED[backend])
    assert not others & set(env) and not any(o in spec.command_line() for o in others)
    assert spec_from_dict(spec_to_dict(spec)).backend == backend  # run records keep it


def test_without_gpus_nothing_is_pinned_and_env_pins_by_the_backends_variable() -> None:
    assert pinning_env("rocm", []) == {}
    assert pinning_env("cuda", []) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    rocm = InstanceSpec(name="a", model="m", port=1, backend="rocm", env={"HIP_VISIBLE_DEVICES": "5"})
    assert gpus_used(rocm) == {"5"}
    cuda = InstanceSpec(name="b", model="m", port=2, env={"HIP_VISIBLE_DEVICES": "5"})
    assert gpus_used(cuda) == {"0"}  # HIP's variable pins nothing of a CUDA build


def test_the_layout_key_is_checked_and_kept(tmp_path) -> None:
    path = tmp_path / "b.toml"
    path.write_text(
        '[session]\nname = "b"\n[defaults]\nbackend = "rocm"\n'
        '[[instance]]\nname = "a"\nmodel = "m"\nport = 8000\ngpus = [1]\n'
        '[[instance]]\nname = "c"\nmodel = "m"\nport = 8001\nbackend = "ascend"\n'
    )
    assert [s.backend for s in load_layout(path).instances] == ["rocm", "ascend"]
    path.write_text(
        '[session]\nname = "b"\n[[instance]]\nname = "a"\nmodel = "m"\nport = 8000\nbackend = "rocn"\n'
    )
    with pytest.raises(LayoutError, match=r"instance\[0\]\.backend: expected one of cuda, rocm.*rocm"):
        load_layout(path)


def test_exports_pin_by_backend() -> None:
    from vtui.export import export_layout

    spec = InstanceSpec(name="a", model="m", port=8000, gpus=(1,), backend="xpu")
    result = export_layout(Layout(SessionSpec(name="x"), (spec,)), "systemd")
    text = "\n".join(f.text for f in result.files)
    assert "Environment=ZE_AFFINITY_MASK=1" in text and "CUDA_VISIBLE_DEVICES" not in text
