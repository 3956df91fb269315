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


# -- one client of the session socket ------------------------------------------------------------------
SOCKET_CLIENT = "vtui/service/client.py"
# Others that open a Unix socket, each for a reason that is not speaking to a supervisor: the ssh
# stand-in relays a forward as `ssh -L` does (the test double of the link, not a client).
SOCKET_OPENERS_ALLOWED = {SOCKET_CLIENT, "vtui/testing/fake_ssh.py"}
_UNIX_CALLS = {"open_unix_connection", "create_unix_connection"}


def _socket_openings(path: Path) -> list[str]:
    """Where a module opens a Unix socket as a client: AF_UNIX, asyncio's unix connections, an
    httpx-style `uds=` transport, `http.client` (the CLI's old feed reader)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in {"AF_UNIX", *_UNIX_CALLS}:
            found.append(f"{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.Name) and node.id in {"AF_UNIX", *_UNIX_CALLS}:
            found.append(f"{node.id} (line {node.lineno})")
        elif isinstance(node, ast.keyword) and node.arg == "uds":
            found.append(f"uds= (line {node.value.lineno})")
        elif isinstance(node, ast.ImportFrom) and node.module == "socket":
            found += [f"from socket import {a.name}" for a in node.names if a.name == "AF_UNIX"]
    found += [f"imports {name}" for name in _imported_names(path) if name == "http.client"]
    return found


def test_only_the_client_module_opens_the_session_socket() -> None:
    """The CLI, the dashboard and other hosts' forwarded sockets all speak to a supervisor through
    `vtui.service.client` (h11, one codec): no other module opens a Unix socket as a client."""
    files = sorted((ROOT / "vtui").rglob("*.py"))
    openers = {str(p.relative_to(ROOT)): found for p in files if (found := _socket_openings(p))}
    assert SOCKET_CLIENT in openers, "the client module opens no socket: the scan would pass vacuously"
    assert {k: v for k, v in openers.items() if k not in SOCKET_OPENERS_ALLOWED} == {}


def test_socket_scan_catches_each_way_in(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import socket, asyncio, httpx\nfrom socket import AF_UNIX\nimport http.client\n"
        "s = socket.socket(socket.AF_UNIX)\nasync def f():\n    await asyncio.open_unix_connection('x')\n"
        "t = httpx.HTTPTransport(uds='x')\n"
    )
    found = " ".join(_socket_openings(bad))
    for way in (
        "AF_UNIX (line 4)",
        "open_unix_connection",
        "uds=",
        "from socket import AF_UNIX",
        "http.client",
    ):
        assert way in found, way


def test_the_dashboard_and_the_cli_reach_the_socket_through_the_client() -> None:
    """The modules that speak to a supervisor import the one client (and no module its predecessors)."""
    for module in ("vtui/service/remote_feed.py", "vtui/service/remote.py", "vtui/commands/_runs.py"):
        assert "vtui.service.client" in _imported_names(ROOT / module), module
    assert not (ROOT / "vtui/service/remote_http.py").exists()


def test_the_architecture_doc_is_short_and_names_only_modules_that_exist() -> None:
    """docs/ARCHITECTURE.md stays under 1,500 words, and every `package.module` it names is there."""
    import re

    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "ARCHITECTURE.md").read_text()
    assert len(text.split()) < 1500
    packages = {p.name for p in (root / "vtui").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    named = set(re.findall(r"`(?:vtui\.)?([a-z]+)\.([a-z_]+)", text))
    missing = [
        f"{pkg}.{mod}"
        for pkg, mod in named
        if pkg in packages
        and not (root / "vtui" / pkg / f"{mod}.py").exists()
        and not (root / "vtui" / pkg / mod).is_dir()
    ]
    assert not missing, f"docs/ARCHITECTURE.md names modules that do not exist: {sorted(missing)}"


# -- no god classes: small parts, composed ---------------------------------------------------------------
MAX_METHODS = 30
MAX_CLASS_LINES = 400
# Every package is held to the limits (issue 26: the supervisor, the session service, the dashboard and
# the sim's server were the god classes; they are composed of parts now).
SIZED_PACKAGES = ["vtui"]
# Over the limits still, each with why; the list may only shrink (an entry over nothing fails).
OVERSIZED_ALLOWED: dict[str, str] = {}


def _class_problems(path: Path) -> list[str]:
    """Each class of the module over MAX_METHODS methods (its own, nested functions not counted) or
    MAX_CLASS_LINES lines, or with a base class named *Mixin."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    problems: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{node.name}"
        methods = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in node.body)
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        if methods > MAX_METHODS:
            problems.append(f"{where}: {methods} methods (at most {MAX_METHODS})")
        if lines > MAX_CLASS_LINES:
            problems.append(f"{where}: {lines} lines (at most {MAX_CLASS_LINES})")
        mixins = [ast.unparse(b) for b in node.bases if ast.unparse(b).split(".")[-1].endswith("Mixin")]
        if mixins:
            problems.append(f"{where}: built from mixins ({', '.join(mixins)}): compose parts instead")
    return problems


@pytest.mark.parametrize("package", SIZED_PACKAGES)
def test_no_class_is_over_the_limits_or_built_from_mixins(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no modules in {package}: the check would pass vacuously"
    problems = [
        p for path in files for p in _class_problems(path) if p.split(": ")[0] not in OVERSIZED_ALLOWED
    ]
    assert problems == []


def test_each_allowed_excess_is_still_there() -> None:
    """A class cut down to the limits leaves the allow-list."""
    found = {
        p.split(": ")[0]
        for package in SIZED_PACKAGES
        for path in (ROOT / package).rglob("*.py")
        for p in _class_problems(path)
    }
    assert sorted(set(OVERSIZED_ALLOWED) - found) == []


def test_the_class_check_catches_each_excess(tmp_path: Path) -> None:
    def methods(n: int) -> str:
        return "".join(f"    def m{i}(self):\n        pass\n" for i in range(n))

    bad = tmp_path / "bad.py"
    bad.write_text(
        f"class Many:\n{methods(MAX_METHODS + 1)}\n"
        + "class Long:\n"
        + "    x = 1\n" * MAX_CLASS_LINES  # the class line and these: one line over
        + "\n"
        "class Mixed(base.FeedMixin, object):\n    pass\n\n"
        f"class Fine:\n{methods(MAX_METHODS)}"
    )
    found = " ".join(_class_problems(bad))
    assert f"Many: {MAX_METHODS + 1} methods" in found and f"Long: {MAX_CLASS_LINES + 1} lines" in found
    assert "Mixed: built from mixins (base.FeedMixin)" in found and "Fine" not in found
