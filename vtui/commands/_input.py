"""Reading a user-given text input (a saved /metrics payload, a pasted log) for the file commands: a
binary file is bad input (ValueError: exit 2), an unreadable one a failure (OSError: exit 1), and
either is said in words, never an empty answer."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

MAX_LINES = 1_000_000


def _stdin_bytes() -> bytes:
    buffer = getattr(sys.stdin, "buffer", None)  # a test's StringIO stdin has none
    return buffer.read() if buffer is not None else sys.stdin.read().encode("utf-8", errors="replace")


def read_text_input(source: str) -> str:
    """The text of `source` (a path, or - for stdin). Raises OSError("cannot read NAME: why") when it
    cannot be read, ValueError naming the file when it is binary (a NUL byte, or mostly not UTF-8)."""
    name = "stdin" if source == "-" else source
    try:
        data = _stdin_bytes() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise OSError(f"cannot read {name}: {exc.strerror or exc}") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise ValueError(f"{name}: binary data (a NUL byte at offset {nul}), not a text file")
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    if text and bad > max(16, len(text) // 10):
        raise ValueError(f"{name}: binary data ({bad} bytes that are not UTF-8 text), not a text file")
    return text


def seconds(text: str) -> float:
    """argparse type: a duration in seconds, finite and >= 0 (argparse exits 2 naming the option)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def line_count(text: str) -> int:
    """argparse type: a number of lines, 0 to MAX_LINES."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of lines, got {text!r}") from None
    if not 0 <= value <= MAX_LINES:
        raise argparse.ArgumentTypeError(f"expected 0 to {MAX_LINES:,} lines, got {text!r}")
    return value


class Value(argparse.Action):
    """An option's action that refuses `--opt=--`: argparse drops a value of `--` and would hand the
    command an empty list instead of calling the option's type."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if isinstance(values, list):
            parser.error(f"argument {option_string or self.dest}: expected a value")
        setattr(namespace, self.dest, values)


def bounded(
    low: float, high: float | None = None, *, integer: bool = False, above: bool = False
) -> Callable[[str], float]:
    """argparse type: a finite number >= low (> low with `above`), <= high when given; whole with
    `integer`. The error names the range."""
    kind = "a whole number" if integer else "a number"
    rng = f"{'>' if above else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")

    def parse(text: str) -> float:
        try:
            value: float = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind} {rng}, got {text!r}") from None
        ok = math.isfinite(value) and (value > low if above else value >= low)
        if not ok or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {kind} {rng}, got {text!r}")
        return value

    return parse


def number_list(text: str) -> tuple[float, ...]:
    """argparse type: comma-separated positive numbers (ramp levels, request rates)."""
    parse = bounded(0, above=True)
    values = tuple(parse(part.strip()) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers > 0, got {text!r}")
    return values
