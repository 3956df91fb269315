"""The layering rule of docs/ARCHITECTURE.md, checked two ways: import-linter's contracts (pyproject.toml:
the Textual ban, the layers, independence, no cycles between sibling modules) and a direct scan of the
modules' imports (catches lazy imports inside functions too)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NON_UI = [
    "vtui/core",
    "vtui/layouts",
    "vtui/supervisor",
    "vtui/service",
    "vtui/export",
    "vtui/testing",
    "vtui/telemetry",
    "vtui/sim",
    "vtui/bench",
    "vtui/planner",
    "vtui/planner.py",
    "vtui/tune",
]


def _modules() -> list[Path]:
    files: list[Path] = []
    for entry in NON_UI:
        path = ROOT / entry
        if path.is_dir():
            files.extend(sorted(path.rglob("*.py")))
        elif path.exists():
            files.append(path)
    return files


def _imported_names(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_non_ui_packages_never_import_textual_or_ui() -> None:
    offenders = []
    for path in _modules():
        for name in _imported_names(path):
            if (
                name == "textual"
                or name.startswith("textual.")
                or name == "vtui.ui"
                or name.startswith("vtui.ui.")
            ):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert _modules(), "no non-UI modules found: the scan would pass vacuously"
    assert offenders == []


def test_core_imports_nothing_else_of_vtui() -> None:
    """`vtui.core` is the bottom layer: the model imports only itself (and the stdlib and third parties)."""
    core = sorted((ROOT / "vtui" / "core").rglob("*.py"))
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in core
        for name in _imported_names(path)
        if (name == "vtui" or name.startswith("vtui."))
        and not (name == "vtui.core" or name.startswith("vtui.core."))
    ]
    assert core, "no core modules found: the scan would pass vacuously"
    assert offenders == []


def test_scan_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f():\n    from textual.app import App\n\nif TYPE_CHECKING:\n    import vtui.supervisor\n"
    )
    assert "textual.app" in _imported_names(bad)
    assert "vtui.supervisor" in _imported_names(bad)


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter not installed")
def test_import_linter_contract() -> None:
    result = subprocess.run(
        ["lint-imports"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
