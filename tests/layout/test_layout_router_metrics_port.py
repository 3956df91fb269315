"""`router_metrics_port`: the router's Prometheus port, set in the layout, checked like any port."""

from __future__ import annotations

from pathlib import Path

import pytest

from vtui.layouts import LayoutError, load_layout, save_layout

GROUP = """
[[instance]]
name = "chat"
model = "org/m"
port = 8100
replicas = 2
router_port = 9000
"""


def load(tmp_path: Path, text: str):
    path = tmp_path / "layout.toml"
    path.write_text(text)
    return load_layout(path)


def test_it_loads_and_saves(tmp_path: Path) -> None:
    layout = load(tmp_path, GROUP + "router_metrics_port = 9090   # Prometheus scrapes this\n")
    assert layout.instance("chat").router_metrics_port == 9090
    save_layout(layout.replace_instance(layout.instance("chat").with_flags({"seed": 1})))
    assert "router_metrics_port = 9090   # Prometheus scrapes this" in (tmp_path / "layout.toml").read_text()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("router_metrics_port = 0\n", r"instance\[0\]\.router_metrics_port: expected a port number 1-65535"),
        ("router_metrics_port = 8101\n", "port 8101"),  # a replica's port
        ("router_metrics_port = 9000\n", "port 9000"),  # the router's own
    ],
)
def test_a_bad_or_taken_port_is_refused(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        load(tmp_path, GROUP + extra)


def test_only_with_a_router(tmp_path: Path) -> None:
    text = GROUP.replace("router_port = 9000\n", "router_metrics_port = 9090\n")
    with pytest.raises(LayoutError, match="router_metrics_port: only with router_port"):
        load(tmp_path, text)
    with pytest.raises(LayoutError, match="only with replicas > 1"):
        load(tmp_path, text.replace("replicas = 2\n", ""))
