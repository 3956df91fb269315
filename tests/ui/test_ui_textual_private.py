"""Textual's private API, used by vtui only through vtui.ui.textual_private: each name it lists exists in
the installed Textual (a release that drops one fails here, naming it), and no other module of vtui.ui
uses a private name of a Textual class it subclasses or imports a private Textual module."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest
import textual
from textual._compositor import Compositor

from vtui.ui import textual_private
from vtui.ui.textual_private import missing_private_api

UI = Path(__file__).resolve().parents[2] / "vtui" / "ui"
ALLOWED = UI / "textual_private.py"


def test_every_private_name_vtui_uses_is_in_this_textual() -> None:
    missing = missing_private_api()
    assert not missing, (
        f"Textual {textual.__version__} lacks {', '.join(missing)}, which vtui.ui.textual_private uses "
        "(its docstring says what for): replace it there, or bound textual below this version in "
        "pyproject.toml"
    )


def test_a_missing_name_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(Compositor, "_get_renders")
    assert missing_private_api() == ["textual._compositor.Compositor._get_renders"]


def test_the_docstring_lists_every_checked_name() -> None:
    doc = textual_private.__doc__ or ""
    for what, _ in textual_private.PRIVATE_API:
        attribute = what.rsplit(".", 1)[1]
        assert f"{attribute}" in doc, f"{what} is checked but not explained in the module's docstring"


def _textual_private_uses(path: Path) -> list[str]:
    """Private Textual modules imported, and `self._x` / `def _x` in classes deriving from Textual's where
    `_x` is the Textual base's (an override or a clash, as BenchScreen's `_task` was)."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        module = node.module if isinstance(node, ast.ImportFrom) and node.level == 0 else None
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [module or ""]
        for name in names:
            parts = name.split(".")
            if parts[0] == "textual" and any(p.startswith("_") for p in parts[1:]):
                found.append(f"{path.name}:{node.lineno}: imports {name}")
    relative = path.relative_to(UI.parent.parent).with_suffix("")
    module = importlib.import_module(".".join(relative.parts))
    for cls_node in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        cls = getattr(module, cls_node.name, None)
        if not isinstance(cls, type):
            continue
        bases = [b for b in cls.__mro__ if b.__module__.split(".")[0] == "textual"]
        if not bases:
            continue
        source = "\n".join(inspect.getsource(b) for b in bases)
        for node in ast.walk(cls_node):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                name = node.attr
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = node.name
            else:
                continue
            if not name.startswith("_") or name.startswith("__"):
                continue
            if any(name in vars(b) for b in bases) or re.search(rf"(def |self\.){name}\b", source):
                found.append(f"{path.name}:{node.lineno}: {cls_node.name} uses Textual's {name}")
    return found


def test_no_other_module_uses_textuals_private_names() -> None:
    found = [
        use for path in sorted(UI.rglob("*.py")) if path != ALLOWED for use in _textual_private_uses(path)
    ]
    assert not found, "Textual private API outside vtui.ui.textual_private:\n  " + "\n  ".join(found)
