"""Every file in tests/layout/bad is a layout with a known fault (named after it); each `# expect:` line
names the line, dotted key and message that `load_layout` must report, alongside the file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vtui.layouts import LayoutError, load_layout

BAD = Path(__file__).with_name("bad")
_EXPECT = re.compile(r"^# expect: (\d+|-) (\S+): (.*)$")


def _expectations(path: Path) -> list[tuple[int | None, str, str]]:
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _EXPECT.match(line)
        if match:
            number = None if match.group(1) == "-" else int(match.group(1))
            found.append((number, match.group(2), match.group(3)))
    return found


BAD_FILES = sorted(BAD.glob("*.toml"))


def test_bad_folder_is_populated() -> None:
    assert len(BAD_FILES) >= 40
    for path in BAD_FILES:
        assert _expectations(path), f"{path.name} has no '# expect:' line"


@pytest.mark.parametrize("path", BAD_FILES, ids=[p.stem for p in BAD_FILES])
def test_bad_layout_reports_file_line_and_key(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VTUI_TEST_UNDEFINED_SECRET", raising=False)
    monkeypatch.delenv("VTUI_TEST_UNDEFINED_MODEL", raising=False)
    with pytest.raises(LayoutError) as caught:
        load_layout(path)
    problems = caught.value.problems
    text = str(caught.value)
    for line, key, message in _expectations(path):
        matching = [p for p in problems if p.key == key and message in p.message]
        assert matching, f"no problem {key}: {message!r} in:\n{text}"
        problem = matching[0]
        assert problem.file == str(path)
        assert problem.line == line, f"{key} reported at line {problem.line}, expected {line}"
        where = f"{path}:{line}" if line is not None else str(path)
        assert str(problem).startswith(f"{where}: {key}: "), str(problem)
        assert str(problem) in text


def test_every_problem_is_reported_at_once() -> None:
    path = BAD / "every_problem_at_once.toml"
    with pytest.raises(LayoutError) as caught:
        load_layout(path)
    assert len(caught.value.problems) == len(_expectations(path))
    lines = [p.line for p in caught.value.problems]
    assert lines == sorted(lines), "problems come in file order"


def test_missing_file_is_one_clear_problem(tmp_path: Path) -> None:
    with pytest.raises(LayoutError) as caught:
        load_layout(tmp_path / "nope.toml")
    assert str(caught.value) == f"{tmp_path / 'nope.toml'}: no such layout file"
