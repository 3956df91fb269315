"""Conventions the checkers cannot check by themselves: a broad `except` kept with `# noqa: BLE001`
says why; the per-package strict mypy settings in pyproject.toml are what `mypy --strict` turns on."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("vtui", "tests", "benchmarks", "scripts")
# the why: after "BLE001 — ", at least two words
_JUSTIFIED = re.compile(r"noqa: BLE001 — \S+ \S+")


def _noqa_comments(text: str, code: str) -> list[tuple[int, str]]:
    """(line, comment) of every comment in `text` that silences `code`."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT and f"noqa: {code}" in token.string:
            found.append((token.start[0], token.string))
    return found


def unjustified_broad_excepts(text: str) -> list[tuple[int, str]]:
    return [(line, c) for line, c in _noqa_comments(text, "BLE001") if not _JUSTIFIED.search(c)]


def test_every_silenced_broad_except_says_why() -> None:
    bad = []
    for folder in CHECKED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, comment in unjustified_broad_excepts(path.read_text(encoding="utf-8")):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {comment}")
    assert not bad, "a broad except needs `# noqa: BLE001 — why`:\n" + "\n".join(bad)


def test_the_check_tells_a_reason_from_none() -> None:
    code = (
        "try:\n    pass\n"
        "except Exception:  # noqa: BLE001\n    pass\n"
        "try:\n    pass\n"
        "except Exception:  # noqa: BLE001 — a consumer bug must not end the loop\n    pass\n"
        "s = '# noqa: BLE001'\n"
    )
    assert unjustified_broad_excepts(code) == [(3, "# noqa: BLE001")]


# --strict flags that mypy takes only in its global section
_GLOBAL_ONLY = {"warn_redundant_casts", "warn_unused_configs"}
STRICT_PACKAGES = {
    "vtui.core.*",
    "vtui.layouts.*",
    "vtui.telemetry.*",
    "vtui.planner.*",
    "vtui.export.*",
    "vtui.bench.*",
    "vtui.tune.*",
    "vtui.supervisor.*",
    "vtui.service.*",
}


def strict_settings(help_text: str) -> dict[str, bool]:
    """The config settings `--strict` stands for, from `mypy --help`: `--no-x` is `x = false`."""
    start = help_text.index("Strict mode; enables the following flags:")
    end = help_text.index("\n  --", start)
    flags = re.findall(r"--[a-z-]+", re.sub(r"-\s*\n\s*", "-", help_text[start:end]))
    return {
        flag.removeprefix("--no-").removeprefix("--").replace("-", "_"): not flag.startswith("--no-")
        for flag in flags
    }


def test_strict_packages_get_every_flag_of_mypy_strict() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "mypy", "--help"], capture_output=True, text=True, check=True
    ).stdout
    wanted = strict_settings(help_text)
    assert {"disallow_untyped_defs", "warn_return_any", "implicit_reexport"} <= wanted.keys()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    for name in _GLOBAL_ONLY & wanted.keys():
        assert config.get(name) is wanted[name], f"[tool.mypy] {name} = {str(wanted[name]).lower()}"
    per_module = {k: v for k, v in wanted.items() if k not in _GLOBAL_ONLY}
    strict = [o for o in config["overrides"] if STRICT_PACKAGES & set(o["module"])]
    assert {m for o in strict for m in o["module"]} >= STRICT_PACKAGES
    for override in strict:
        settings = {k: v for k, v in override.items() if k != "module"}
        assert settings == per_module, f"{override['module']}: not what --strict turns on"


def test_strict_settings_read_the_help_text() -> None:
    text = (
        "  --strict                  Strict mode; enables the following flags:\n"
        "                            --disallow-any-generics, --warn-\n"
        "                            return-any, --no-implicit-reexport\n"
        "  --disable-error-code NAME\n"
    )
    assert strict_settings(text) == {
        "disallow_any_generics": True,
        "warn_return_any": True,
        "implicit_reexport": False,
    }
