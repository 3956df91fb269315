"""Text formatting for the dashboard: every missing value is `--`, never 0, and everything is ASCII."""

from __future__ import annotations

import re
from collections.abc import Iterable

DASH = "--"


def num(value: float | None, spec: str = ".0f") -> str:
    return DASH if value is None else format(value, spec)


def tokens(value: float | None) -> str:
    """12345 -> 12.3k; 2500000 -> 2.50M."""
    if value is None:
        return DASH
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def rate(value: float | None) -> str:
    if value is None:
        return DASH
    if value >= 1e4:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def pct(fraction: float | None) -> str:
    return DASH if fraction is None else f"{fraction * 100:.0f}%"


def seconds(value: float | None) -> str:
    """A latency: 85ms, 1.24s, 12s."""
    if value is None:
        return DASH
    if value < 1:
        return f"{value * 1000:.0f}ms"
    return f"{value:.2f}s" if value < 10 else f"{value:.0f}s"


def duration(value: float | None) -> str:
    """An uptime: 45s, 3m05s, 2h07m, 3d04h."""
    if value is None or value < 0:
        return DASH
    s = int(value)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def uptime(value: float | None) -> str:
    """An uptime on a card: 45s, then whole minutes (3m, 59m), then as `duration` (2h07m). A line that
    changes once a minute instead of every second is not repainted every second."""
    if value is not None and 60 <= value < 3600:
        return f"{int(value) // 60}m"
    return duration(value)


def gib(value: float | None) -> str:
    return DASH if value is None else f"{value / 2**30:.1f}"


def size(value: float | None) -> str:
    """Bytes: 512 B, 64.0 KiB, 1.50 MiB, 12.3 GiB."""
    if value is None:
        return DASH
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}" if unit == "KiB" else f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def bar(fraction: float | None, width: int) -> str:
    """An ASCII gauge: `#####.....`; unknown is all `-`."""
    if fraction is None:
        return "-" * width
    filled = max(0, min(width, round(fraction * width)))
    return "#" * filled + "." * (width - filled)


def gpus(indices: Iterable[int]) -> str:
    text = ",".join(str(i) for i in indices)
    return text or "cpu"


def flag_value(value: object) -> str:
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)


def fact(name: str, value: object) -> tuple[str, str]:
    """A startup fact as (label, value) in one precision per unit: `model_weights_gib 15.2737` ->
    ("model weights", "15.27 GiB"), `model_load_secs 1.622808` -> ("model load", "1.62 s"), token and
    block counts with thousands separators, concurrency as `10.0x`, fractions as `0.90`."""
    label = name.replace("_", " ")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return label, flag_value(value)
    if name.endswith("_gib"):
        return label[: -len(" gib")], f"{value:.2f} GiB"
    if name.endswith("_secs"):
        return label[: -len(" secs")], f"{value:.2f} s"
    if name.startswith("max_concurrency") and isinstance(value, float):
        return label, f"{value:.1f}x"
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
        value = int(value)
    if isinstance(value, int):
        return label, f"{value:,}"
    return label, f"{value:.2f}"


def path(value: object, limit: int = 48) -> str:
    """A file path for a one-line title: the home folder as `~`, and a long one cut to `…/` and its
    last folders (what follows it on the line, such as the unsaved marker, must stay in view)."""
    import os

    text = str(value)
    home = os.path.expanduser("~")
    if home not in ("", "/") and (text == home or text.startswith(home + os.sep)):
        text = "~" + text[len(home) :]
    if len(text) <= limit:
        return text
    parts = text.split(os.sep)
    tail = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + len(tail) + 3 > limit:
            break
        tail = part + os.sep + tail
    return "…" + os.sep + tail


_LINE_BREAKS = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": " ", "\v": "\\v", "\f": "\\f"})
_CONTROL = re.compile("[\u0000-\u001f\u007f\u0085\u2028\u2029]")


def one_line(text: str) -> str:
    """Text for one row of a table: line breaks as `\\n` (a command line of `python -c '...'` keeps
    its shape), a tab as a space, any other control character as `?` (none reaches the terminal)."""
    text = text.translate(_LINE_BREAKS)
    return _CONTROL.sub("?", text) if _CONTROL.search(text) else text
