"""The fleet keys (engine = "external" with url/api_key; replicas with router_port/replica_gpus): what the
model makes of them, that saving keeps them, what `vtui check` says, and that the supervisor's preflight
passes an attached server over (it is watched, never launched: tests/core/test_core_attached.py) and
checks replicas as the copies they expand to."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from vtui.cli import main
from vtui.layouts import load_layout, save_layout
from vtui.supervisor.preflight import preflight

FLEET = """
[session]
name = "fleet"

[defaults]
model = "Qwen/Qwen3-8B"
flags.max-num-seqs = 64

[[instance]]
name = "remote"
engine = "external"
url = "https://gpu2.lan:8443/"
api_key = "${VTUI_FLEET_KEY}"

[[instance]]
name = "small"
port = 8100
replicas = 2
router_port = 9000
gpus = [0, 1]

[[instance]]
name = "pinned"
port = 8200
replicas = 2
replica_gpus = [[2, 3], [4, 5]]
flags.tensor-parallel-size = 2
"""


@pytest.fixture
def fleet_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VTUI_FLEET_KEY", "fleet-s3cret")
    path = tmp_path / "fleet.toml"
    path.write_text(FLEET, encoding="utf-8")
    return path


def test_model_fields(fleet_path: Path) -> None:
    layout = load_layout(fleet_path)
    remote, small, pinned = layout.instances
    assert (remote.engine, remote.host, remote.port, remote.base_url) == (
        "external",
        "gpu2.lan",
        8443,
        "https://gpu2.lan:8443",
    )
    assert remote.api_key == "fleet-s3cret" and "fleet-s3cret" not in repr(remote)
    assert not remote.flags and not remote.gpus  # [defaults] flags are about launching: not inherited
    assert [(r.name, r.port, r.gpus) for r in small.replica_specs()] == [
        ("small-0", 8100, (0,)),
        ("small-1", 8101, (1,)),
    ]
    assert small.router_port == 9000
    assert [r.gpus for r in pinned.replica_specs()] == [(2, 3), (4, 5)]
    assert all(r.replicas == 1 for r in pinned.replica_specs())


def test_saving_keeps_the_keys_and_the_reference(fleet_path: Path, tmp_path: Path) -> None:
    layout = load_layout(fleet_path)
    copy = save_layout(layout, tmp_path / "copy.toml")  # the full rewrite
    text = copy.read_text()
    assert "fleet-s3cret" not in text and "${VTUI_FLEET_KEY}" in text
    assert load_layout(copy).instances == layout.instances
    changed = layout.replace_instance(layout.instance("small").with_flags({"max-num-seqs": 32}))
    save_layout(changed, fleet_path)  # in place
    again = load_layout(fleet_path)
    assert again.instances == changed.instances
    assert "fleet-s3cret" not in fleet_path.read_text()


def test_check_lists_them_and_says_replicas_are_not_supervised_yet(fleet_path: Path) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["check", str(fleet_path)])
    text = out.getvalue()
    assert code == 0
    assert "remote (external https://gpu2.lan:8443)" in text
    assert "small (vllm ×2 :8100-8101 gpus 0|1, router :9000)" in text
    assert "pinned (vllm ×2 :8200-8201 gpus 2,3|4,5)" in text
    assert "not supported yet by the supervisor" not in text  # attached servers are watched; replicas run


def test_preflight_passes_an_attached_server_over_and_checks_replicas_as_their_copies(
    fleet_path: Path,
) -> None:
    layout = load_layout(fleet_path)
    result = preflight(layout, nvml=None, cpu_count=64)
    assert result.problems == [], result.problems
    assert preflight(layout, ["remote"], cpu_count=64).problems == []  # attached: nothing to launch
    # replicas: checked as the copies they run as (a port held by someone else is named per replica)
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 8101))
        held.listen()
        problems = preflight(layout, ["small"], nvml=None, cpu_count=64).problems
    assert any('"small-1": port 8101 is already in use' in p for p in problems), problems
