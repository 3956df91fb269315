"""Every third-party module vtui imports is declared in pyproject.toml's `[project].dependencies` (or, for
an import guarded by `except ImportError`, in an extra), and every declared dependency is imported: an
undeclared one works here only because a test tool happened to bring it in."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

# Imported, guarded by `except ImportError`, and declared nowhere on purpose: the reason for each.
UNDECLARED_ON_PURPOSE = {
    "torch": "`vtui sim --sim-device cuda` only (vtui.sim.device); it names the missing torch",
}


def _dist(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return _normalized(match.group(1))


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether an import sits in a `try:` body with an `except ImportError` (or ModuleNotFoundError)."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.Try) and child in parent.body:
            for handler in parent.handlers:
                caught = handler.type
                names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
                if any(
                    isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names
                ):
                    return True
        child, parent = parent, parents.get(parent)
    return False


def third_party_imports(package: Path) -> dict[str, list[tuple[str, bool]]]:
    """Top-level module name -> [(file:line, guarded by except ImportError)] for vtui's imports."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "vtui" or top in sys.stdlib_module_names:
                    continue
                where = f"{path.relative_to(package.parent)}:{node.lineno}"
                found.setdefault(top, []).append((where, _guarded(node, parents)))
    return found


def _distributions_of(module: str) -> set[str]:
    installed = importlib.metadata.packages_distributions().get(module)
    if installed:
        return {_normalized(d) for d in installed}
    return {_normalized(module)}  # not installed here (tomli on 3.11+): its name, as most are


def test_every_imported_third_party_module_is_declared() -> None:
    declared = {_dist(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = {
        _dist(r) for reqs in PYPROJECT["project"].get("optional-dependencies", {}).values() for r in reqs
    }
    problems = []
    for module, sites in third_party_imports(ROOT / "vtui").items():
        if _distributions_of(module) & declared:
            continue
        unguarded = [where for where, guarded in sites if not guarded]
        if not unguarded and (module in UNDECLARED_ON_PURPOSE or _distributions_of(module) & extras):
            continue
        dist = "/".join(sorted(_distributions_of(module)))
        problems.append(
            f"{module} (distribution {dist}) is imported at {', '.join(w for w, _ in sites[:3])}{' …' if len(sites) > 3 else ''} but is not "
            "in [project].dependencies"
            + ("" if unguarded else " (nor in an extra, nor in UNDECLARED_ON_PURPOSE)")
        )
    assert not problems, "undeclared dependencies:\n  " + "\n  ".join(problems)


def test_every_declared_dependency_is_imported() -> None:
    imported = set().union(*(_distributions_of(m) for m in third_party_imports(ROOT / "vtui")))
    unused = [r for r in PYPROJECT["project"]["dependencies"] if _dist(r) not in imported]
    assert not unused, f"declared in [project].dependencies but never imported by vtui: {unused}"


def test_the_scan_sees_an_undeclared_import(tmp_path: Path) -> None:
    """The scan itself: a guarded and an unguarded import of a third-party module are both found."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(
        "import os\nimport h11\nfrom . import b\ntry:\n    import torch\nexcept ImportError:\n    pass\n"
    )
    found = third_party_imports(package)
    assert {m: [g for _, g in s] for m, s in found.items()} == {"h11": [False], "torch": [True]}
    assert _distributions_of("pynvml") == {"nvidia-ml-py"}  # a module named unlike its distribution
