"""Conventions ruff cannot check by itself: a broad `except` kept with `# noqa: BLE001` says why."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

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
