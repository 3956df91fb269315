"""The layout errors every part of vtui.layouts raises: one problem is `file:line: key: message`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LayoutError", "LayoutProblem", "NoLayoutError", "SaveRefused"]


@dataclass(frozen=True)
class LayoutProblem:
    file: str
    line: int | None
    key: str  # dotted: "instance[2].flags.max-num-seqs"; "" for the file as a whole
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        key, message = shown(self.key, 120), shown(self.message, 400)
        if key and (key != key.strip() or not key.strip()):
            key = json.dumps(key)  # a key of blanks (`" " = 1`) is shown quoted, not as empty space
        return f"{where}: {key}: {message}" if key else f"{where}: {message}"


def shown(text: str, limit: int) -> str:
    """`text` on one line and of sane length: control characters escaped (a key may hold a newline), a
    long one cut short with its length (a 5000-character key is not echoed back)."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else f"{text[: limit // 2]}… ({len(text)} characters)"


class LayoutError(Exception):
    """A layout that cannot be used; `.problems` lists every problem found, in file order."""

    def __init__(self, problems: Iterable[LayoutProblem], warnings: Iterable[str] = ()) -> None:
        self.problems = list(problems)
        self.warnings = list(warnings)  # found alongside the problems (printable lines)
        super().__init__("\n".join(str(p) for p in self.problems))


class NoLayoutError(LayoutError):
    """No layout path given and none remembered: the user must name one."""

    def __init__(self, message: str) -> None:
        super().__init__([LayoutProblem("vtui", None, "", message)])
        self.message = message

    def __str__(self) -> str:
        return self.message


class SaveRefused(LayoutError):
    """A save into an existing layout file that could not keep what the user has in it (comments, keys
    changed on disk): the file is left as it is. `aside`: where the layout was written instead (PATH.new)."""

    def __init__(self, file: Path, reason: str, aside: Path | None = None) -> None:
        message = f"not saved: {reason}"
        if aside is not None:
            message += f"; the whole layout was written to {aside} instead (without the file's comments)"
        super().__init__([LayoutProblem(str(file), None, "", message)])
        self.file, self.reason, self.aside = file, reason, aside
