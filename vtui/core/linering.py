"""A bounded ring of recent log lines: the one buffer of lines an instance (and a client's copy of
its feed) keeps in memory, bounded in count and in bytes."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

__all__ = ["LINE_RING_BYTES", "LineRing"]

LINE_RING_BYTES = 2 << 20  # what one `LineRing` holds at most (characters plus each line's overhead)
_LINE_COST = 64  # what a kept line costs beyond its characters (a str object, a deque slot)


class LineRing:
    """The most recent log lines, bounded in count and in bytes (a flood of long lines cannot grow it
    past `max_bytes`): the oldest go first. Iterates oldest first, like the deque it stands in for."""

    __slots__ = ("_lines", "_bytes", "max_bytes")

    def __init__(self, maxlen: int, max_bytes: int = LINE_RING_BYTES) -> None:
        self._lines: deque[str] = deque(maxlen=maxlen)
        self._bytes = 0
        self.max_bytes = max_bytes

    @property
    def maxlen(self) -> int | None:
        return self._lines.maxlen

    @property
    def nbytes(self) -> int:
        return self._bytes

    def append(self, line: str) -> None:
        lines = self._lines
        if len(lines) == lines.maxlen:
            self._bytes -= len(lines[0]) + _LINE_COST
        lines.append(line)
        self._bytes += len(line) + _LINE_COST
        while self._bytes > self.max_bytes and len(lines) > 1:
            self._bytes -= len(lines.popleft()) + _LINE_COST

    def extend(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.append(line)

    def clear(self) -> None:
        self._lines.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._lines)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lines)

    def __reversed__(self) -> Iterator[str]:
        return reversed(self._lines)
