"""The dashboard's colours, taken from the current Textual theme (dark, light, high contrast...), and the
sub-cell bars. Colour never carries meaning alone: every coloured value has its text (a state name, a
percentage) and a level marker (`!` high, `!!` critical) beside it, for colour-blind users."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from rich.style import Style
from textual.color import Color, ColorParseError

from vtui.core.state import State

EIGHTHS = " \u258f\u258e\u258d\u258c\u258b\u258a\u2589"  # 0/8 .. 7/8 of a cell, left-aligned
FULL = "\u2588"
EMPTY = "\u2591"  # light shade: the unfilled part (visible without colour too)
SPARK = "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"
WARN_AT, BAD_AT = 0.75, 0.9  # load levels of the bars (KV, GPU memory, utilization)


@dataclass(frozen=True)
class Palette:
    ok: Style
    warn: Style
    bad: Style
    accent: Style
    accent2: Style
    muted: Style
    empty: Style
    bold: Style
    header: Style
    selected: Style  # the fleet table's cursor row
    total: Style  # the ALL row

    def level(self, fraction: float | None) -> Style:
        if fraction is None:
            return self.muted
        return self.bad if fraction >= BAD_AT else self.warn if fraction >= WARN_AT else self.ok

    def state(self, state: State) -> Style:
        return self._states.get(state, Style())

    @functools.cached_property
    def _states(self) -> dict[State, Style]:  # built once per palette (the fleet table asks per row)
        return {
            State.READY: self.ok + Style(bold=True),
            State.STARTING: self.warn + Style(bold=True),
            State.UNHEALTHY: self.bad + Style(bold=True),
            State.STOPPING: self.warn,
            State.STOPPED: self.muted,
            State.CRASHED: self.bad + Style(bold=True, reverse=True),
            State.BACKOFF: self.accent2 + Style(bold=True),
            State.FAILED: self.bad + Style(bold=True, reverse=True),
            State.ASLEEP: self.muted + Style(italic=True),
            State.WAKING: self.warn + Style(italic=True),
            State.UNREACHABLE: self.bad + Style(bold=True),
        }


def level_mark(fraction: float | None) -> str:
    """The non-colour cue of a load level: '' normal, '!' high, '!!' critical."""
    if fraction is None or fraction < WARN_AT:
        return ""
    return "!!" if fraction >= BAD_AT else "!"


def _rich(variables: dict[str, str], key: str, fallback: str) -> Style:
    background = Color.parse(variables.get("background", "#000000"))
    try:
        color = Color.parse(variables.get(key, fallback))
    except ColorParseError:
        color = Color.parse(fallback)
    return Style(color=background.blend(color, color.a).with_alpha(1.0).rich_color)


def _background(variables: dict[str, str], key: str, amount: float) -> Style:
    """A background: the theme's `key` colour blended `amount` over the screen's background."""
    background = Color.parse(variables.get("background", "#000000"))
    try:
        color = Color.parse(variables.get(key, "#808080")).with_alpha(1.0)
    except ColorParseError:
        color = Color.parse("#808080")
    return Style(bgcolor=background.blend(color, amount).rich_color)


_CACHE: dict[str, Palette] = {}


PLAIN = Palette(
    ok=Style(color="green"),
    warn=Style(color="yellow"),
    bad=Style(color="red"),
    accent=Style(color="cyan"),
    accent2=Style(color="magenta"),
    muted=Style(dim=True),
    empty=Style(dim=True),
    bold=Style(bold=True),
    header=Style(bold=True),
    selected=Style(reverse=True),
    total=Style(bold=True),
)


def palette_of(app) -> Palette:
    """The palette of `app`'s current theme (cached per theme name); PLAIN without an app."""
    if app is None:
        return PLAIN
    name = str(getattr(app, "theme", "") or "")
    cached = _CACHE.get(name)
    if cached is not None:
        return cached
    variables = app.get_css_variables()
    muted = _rich(variables, "foreground-muted", "#808080")
    pal = Palette(
        ok=_rich(variables, "success", "green"),
        warn=_rich(variables, "warning", "yellow"),
        bad=_rich(variables, "error", "red"),
        accent=_rich(variables, "primary", "cyan"),
        accent2=_rich(variables, "secondary", "magenta")
        if "light" in name
        else _rich(variables, "accent", "magenta"),
        muted=muted,
        empty=muted + Style(dim=True),
        bold=Style(bold=True),
        header=Style(bold=True) + _rich(variables, "foreground", "white"),
        selected=_background(variables, "primary", 0.35),
        total=_background(variables, "panel", 1.0),
    )
    _CACHE[name] = pal
    return pal


def bar(fraction: float | None, width: int) -> tuple[str, str]:
    """A solid bar cut to eighths of a cell: (filled part, empty part), together `width` cells."""
    if width <= 0:
        return "", ""
    if fraction is None:
        return "", EMPTY * width
    eighths = max(0, min(width * 8, round(fraction * width * 8)))
    full, rest = divmod(eighths, 8)
    filled = FULL * full + (EIGHTHS[rest] if rest else "")
    return filled, EMPTY * (width - len(filled))


def spark(values: list[float | None], width: int) -> str:
    """One row of a sparkline, `width` cells, the newest value at the right; scaled to its own maximum
    (missing values are blanks)."""
    if width <= 0:
        return ""
    tail = values[-width:]
    known = [v for v in tail if v is not None]
    top = max(known) if known else 0.0
    cells = []
    for v in tail:
        if v is None:
            cells.append(" ")
        elif top <= 0:
            cells.append(SPARK[0])
        else:
            cells.append(SPARK[min(7, int(v / top * 7.999))])
    return " " * (width - len(cells)) + "".join(cells)


def spark_rows(values: list[float | None], width: int, rows: int, top: float | None = None) -> list[str]:
    """A sparkline `rows` cells tall and `width` wide (newest at the right, scaled to `top`, else to its
    maximum), top row first."""
    if rows <= 1 and top is None:
        return [spark(values, width)]
    tail = values[-width:] if width > 0 else []
    known = [v for v in tail if v is not None]
    top = top if top is not None else (max(known) if known else 0.0)
    levels = [None if v is None else (v / top * 8 * rows if top > 0 else 0.0) for v in tail]
    out = []
    for r in reversed(range(rows)):
        cells = []
        for level in levels:
            if level is None or level <= r * 8:
                cells.append(SPARK[0] if r == 0 and level is not None else " ")
            elif level >= (r + 1) * 8:
                cells.append(FULL)
            else:
                cells.append(SPARK[min(7, int(level - r * 8))])
        out.append(" " * (width - len(cells)) + "".join(cells))
    return out
