"""CI changes only when we change it: every checker and test tool of vtui's test extras is pinned with
`==` in constraints/ci.txt (scripts/test.sh installs with it), and an exact pin in an extra agrees with it."""

from __future__ import annotations

import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints" / "ci.txt"
TOOL_EXTRAS = ("test-core", "lint", "test")
RUNTIME_PINS = {"textual", "rich"}  # exact in the test extra (the snapshots), floors in dependencies


def _name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def pins(text: str) -> dict[str, str]:
    """name -> version of every `name==version` line; any other requirement line is an error."""
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.+!-]*)", line)
        assert match, f"constraints/ci.txt:{number}: {raw!r} is not an exact `name==version` pin"
        name = _name(match.group(1))
        assert name not in found, f"constraints/ci.txt:{number}: {name} pinned twice"
        found[name] = match.group(2)
    return found


def unpinned(extras: dict[str, list[str]], pinned: dict[str, str]) -> list[str]:
    problems = []
    for extra in TOOL_EXTRAS:
        for requirement in extras[extra]:
            name = _name(requirement)
            if name == "vtui" or name in RUNTIME_PINS:
                continue
            if name not in pinned:
                problems.append(f"{requirement} (extra {extra}) is not pinned in constraints/ci.txt")
            exact = re.search(r"==\s*([^\s,;]+)", requirement)
            if exact and name in pinned and exact.group(1) != pinned[name]:
                problems.append(f"{requirement} (extra {extra}) disagrees with {name}=={pinned[name]}")
    return problems


def test_every_tool_of_the_test_extras_is_pinned_exactly() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    pinned = pins(CONSTRAINTS.read_text(encoding="utf-8"))
    assert {"ruff", "mypy", "import-linter", "pytest", "hypothesis"} <= set(pinned)
    problems = unpinned(extras, pinned)
    assert not problems, "\n".join(problems)


def test_runtime_dependencies_are_not_pinned_in_ci() -> None:
    """The main run takes vtui's runtime dependencies at their newest, scripts/test-floors.sh at their
    floors: a pin here would hide a release that breaks vtui (as one of tomlkit's did)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    assert not runtime & set(pins(CONSTRAINTS.read_text(encoding="utf-8")))


def test_the_check_finds_a_loose_pin() -> None:
    extras = {"test-core": ["pytest>=8", "hypothesis>=6"], "lint": ["ruff>=0.6"], "test": ["syrupy==4.8.0"]}
    problems = unpinned(extras, {"pytest": "8.4.2", "ruff": "0.17.6", "syrupy": "4.9.0"})
    assert problems == [
        "hypothesis>=6 (extra test-core) is not pinned in constraints/ci.txt",
        "syrupy==4.8.0 (extra test) disagrees with syrupy==4.9.0",
    ]
    try:
        pins("ruff>=0.17\n")
    except AssertionError as exc:
        assert "not an exact" in str(exc)
    else:
        raise AssertionError("a ranged line passed as a pin")
