"""`[session] metrics_port` / `metrics_host` (the session's Prometheus endpoint): what validates, the
clear line for what does not, and saves that keep them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from vtui.layouts import LayoutError, load_layout, load_layout_with_warnings, save_layout

BASE = """# my layout
[session]
name = "mp"
{session}

[[instance]]
name = "a"
engine = "sim"
model = "Qwen/Qwen3-0.6B"
port = 8001
"""


def write(tmp_path: Path, session: str) -> Path:
    path = tmp_path / "l.toml"
    path.write_text(BASE.format(session=session))
    return path


def test_defaults_and_values(tmp_path: Path) -> None:
    assert load_layout(write(tmp_path, "")).session.metrics_port is None
    session = load_layout(write(tmp_path, 'metrics_port = 9400\nmetrics_host = "10.0.0.5"')).session
    assert (session.metrics_port, session.metrics_host) == (9400, "10.0.0.5")
    assert load_layout(write(tmp_path, "metrics_port = 9400")).session.metrics_host == "127.0.0.1"
    _, warnings = load_layout_with_warnings(write(tmp_path, 'metrics_port = 9400\nmetrics_host = "0.0.0.0"'))
    assert any("metrics_host" in w and "other machines" in w for w in warnings)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('metrics_port = "9400"', "session.metrics_port: expected a TCP port 1-65535"),
        ("metrics_port = 0", "session.metrics_port: expected a TCP port 1-65535"),
        ("metrics_port = 70000", "session.metrics_port: expected a TCP port 1-65535"),
        ("metrics_port = true", "session.metrics_port: expected a TCP port 1-65535"),
        ("metrics_port = 8001", 'session.metrics_port: 8001 is also a port of instance "a"'),
        ('metrics_port = 9400\nmetrics_host = "my host"', "session.metrics_host: expected an IP address"),
    ],
)
def test_bad_values_name_file_line_and_key(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, line)
    with pytest.raises(LayoutError) as caught:
        load_layout(path)
    text = "\n".join(map(str, caught.value.problems))
    assert message in text and f"{path}:" in text


def test_saves_keep_them_and_the_comments(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    layout = load_layout(path)
    save_layout(replace(layout, session=replace(layout.session, metrics_port=9400, metrics_host="::1")))
    text = path.read_text()
    assert text.startswith("# my layout") and "metrics_port = 9400" in text
    again = load_layout(path)
    assert (again.session.metrics_port, again.session.metrics_host) == (9400, "::1")
    copy = save_layout(again, tmp_path / "copy.toml")  # the full rewrite
    assert load_layout(copy).session == again.session
