"""`vtui ps` text table: columns sized to their content."""

from __future__ import annotations

import re

from vtui.commands.ps import table


def row(name: str, **kw) -> dict:
    base = {
        "name": name,
        "state": "ready",
        "pid": 12345,
        "port": 8001,
        "gpus": [0],
        "restarts": 0,
        "uptime_s": 65.0,
        "model": "Qwen/Qwen3-32B",
        "last_error": None,
    }
    return {**base, **kw}


def test_columns_stay_aligned_with_a_long_name_and_errors_go_under_the_row():
    lines = table(
        [
            row("qwen3-32b-throughput"),
            row("a", state="failed", pid=None, gpus=[], port=9, last_error="CUDA out of memory"),
        ]
    )
    header, first, second, error = lines
    right = {"PID", "PORT", "RESTARTS", "UP"}

    def spans(line: str) -> list[tuple[str, int, int]]:
        return [(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", line)]

    titles = spans(header)
    for line, expected in (
        (first, ["qwen3-32b-throughput", "ready", "12345", "8001", "0", "0", "00:01:05", "Qwen/Qwen3-32B"]),
        (second, ["a", "failed", "-", "9", "-", "0", "00:01:05", "Qwen/Qwen3-32B"]),
    ):
        tokens = spans(line)
        assert [t for t, _, _ in tokens] == expected
        for (title, t_start, t_end), (_, start, end) in zip(titles, tokens, strict=True):
            assert (end == t_end) if title in right else (start == t_start), (title, line)  # aligned
    assert error.index("└") == len("qwen3-32b-throughput") + 1 and error.endswith("CUDA out of memory")


def test_short_names_keep_the_titles_width():
    header, first = table([row("a")])
    assert header.startswith("NAME STATE") and first.startswith("a    ready")
