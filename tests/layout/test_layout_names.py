"""One last-session record for the dashboard and the CLI, and shipped layouts named wherever a layout
path is taken (a file of that name in the current directory wins)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vtui.cli import main
from vtui.commands._runs import load_session
from vtui.layouts import (
    builtin_layout,
    builtin_names,
    default_layout,
    last_layout,
    remember_last,
    resolve_layout_arg,
    split_layout_args,
)
from vtui.layouts.lookup import BUILTIN_DIR

LAYOUT = (
    '[session]\nname = "{name}"\n[[instance]]\nname = "{inst}"\nengine = "sim"\nmodel = "m"\nport = 18000\n'
)


def _write(path: Path, name: str = "mine", inst: str = "a") -> Path:
    path.write_text(LAYOUT.format(name=name, inst=inst), encoding="utf-8")
    return path


def test_shipped_layouts_are_the_checkouts_layouts_folder_named_by_name() -> None:
    """In a checkout (editable install, clone) the shipped layouts are read from the top-level layouts/,
    the one copy (a wheel carries them as vtui/layouts/builtin/: tests/test_install.py)."""
    root = Path(__file__).resolve().parents[2]
    files = sorted((root / "layouts").glob("*.toml"))
    assert [f.stem for f in files] == builtin_names() == ["demo", "latency", "throughput", "vllm-cpu"]
    for f in files:
        found = builtin_layout(f.stem)
        assert found is not None and found.read_bytes() == f.read_bytes()
    assert builtin_layout("demo") == BUILTIN_DIR / "demo.toml"
    assert builtin_layout("demo.toml") == BUILTIN_DIR / "demo.toml"
    assert builtin_layout("nope") is None and builtin_layout("../layouts/demo") is None
    assert not (root / "vtui" / "layouts" / "builtin").exists()  # one copy only


def test_a_name_resolves_to_the_shipped_layout_unless_a_file_here_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_layout_arg("demo") == BUILTIN_DIR / "demo.toml"
    _write(tmp_path / "demo.toml")
    assert resolve_layout_arg("demo") == Path("demo.toml")  # the current directory's file wins
    _write(tmp_path / "demo")
    assert resolve_layout_arg("demo") == Path("demo")
    with pytest.raises(Exception, match="no such layout file .shipped layouts: demo"):
        resolve_layout_arg("no-such-layout")


def test_cli_remembers_for_the_dashboard(tmp_path: Path) -> None:
    from vtui.ui.app import resolve_layout

    path = _write(tmp_path / "cli.toml", name="from-cli")
    load_session([str(path)])  # what up/down/ps/logs/restart do
    assert last_layout() == path.resolve()
    assert resolve_layout(None).session.name == "from-cli"  # the dashboard with no argument


def test_dashboard_remembers_for_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vtui.ui import app as ui_app

    path = _write(tmp_path / "dash.toml", name="from-dashboard")
    monkeypatch.setattr(ui_app.VtuiApp, "run", lambda self, *a, **k: 0)
    assert main([str(path), "--no-start"]) == 0  # `vtui dash.toml`, the dashboard's own path
    assert resolve_layout_arg(None) == path.resolve()  # what `vtui ps` uses
    assert split_layout_args(["a"]) == (path.resolve(), ["a"])


def test_dashboard_opens_a_shipped_layout_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vtui.ui import app as ui_app

    monkeypatch.chdir(tmp_path)
    opened: list[object] = []
    monkeypatch.setattr(ui_app.VtuiApp, "run", lambda self, *a, **k: opened.append(self.store.path) or 0)
    assert main(["demo", "--no-start"]) == 0
    assert opened == [BUILTIN_DIR / "demo.toml"]
    assert last_layout() == (BUILTIN_DIR / "demo.toml").resolve()


def test_no_argument_and_no_last_session_opens_the_demo(tmp_path: Path) -> None:
    from vtui.ui.app import resolve_layout

    assert default_layout() == BUILTIN_DIR / "demo.toml"
    assert resolve_layout(None).session.name == "demo"
    path = _write(tmp_path / "x.toml")
    remember_last(path)
    assert default_layout() == path.resolve()


def test_split_args_takes_a_shipped_name_as_the_layout_unless_it_is_an_instance(tmp_path: Path) -> None:
    assert split_layout_args(["demo", "x"]) == (BUILTIN_DIR / "demo.toml", ["x"])
    remember_last(_write(tmp_path / "l.toml", inst="demo"))  # an instance called "demo"
    assert split_layout_args(["demo"]) == ((tmp_path / "l.toml").resolve(), ["demo"])


def test_check_takes_a_shipped_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "latency"]) == 0
    assert 'OK: session "latency"' in capsys.readouterr().out
