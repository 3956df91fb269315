"""The selected instance under the fleet table: what it runs, why it failed (and that enter shows the
fixes), and labelled sparklines of its recent history (KV %, running/waiting, tok/s, TTFT p95), as many
as the pane's height allows."""

from __future__ import annotations

import os
from collections.abc import Callable

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from vtui.core.model import InstanceSpec
from vtui.core.selfrun import as_dash_m
from vtui.core.state import State
from vtui.telemetry.metrics import HistoryPoint
from vtui.ui import fmt
from vtui.ui.store import InstanceView, Store
from vtui.ui.widgets.instance_rows import max_seqs, router_line
from vtui.ui.widgets.palette import Palette, palette_of, spark_rows

Series = tuple[str, Callable[[HistoryPoint], float | None], Callable[[float | None], str]]
SERIES: tuple[Series, ...] = (
    ("KV cache", lambda s: s.kv_usage, fmt.pct),  # scaled to 100 %
    ("running", lambda s: s.running, fmt.num),  # scaled to max-num-seqs
    ("waiting", lambda s: s.waiting, fmt.num),
    ("gen tok/s", lambda s: s.generation_tps, fmt.rate),
    ("prompt tok/s", lambda s: s.prompt_tps, fmt.rate),
    ("TTFT p95", lambda s: s.ttft_p95, fmt.seconds),
)
LABEL_W = 20
PANE_EVERY_S = 3.0


def short_command(spec: InstanceSpec) -> str:
    """The instance's command without the environment, the program as its base name (vtui's own
    modules as `-m MODULE`: `vtui.core.selfrun.as_dash_m`)."""
    argv = as_dash_m(spec.argv())
    return " ".join([os.path.basename(argv[0]), *argv[1:]]) if argv else ""


def head_lines(view: InstanceView, store: Store, now: float, width: int, pal: Palette) -> list[Text]:
    """The instance's name, state, where it runs, its model and max-num-seqs; its error and problems."""
    spec, st = view.spec, view.status
    head = Text()
    head.append(view.name, style=pal.bold)
    head.append("  ")
    head.append(view.state.name, style=pal.state(view.state))
    if st is not None and st.started_at is not None and view.state in (State.READY, State.UNHEALTHY):
        head.append(f" up {fmt.uptime(now - st.started_at)}", style=pal.muted)
    if st is not None and st.restarts:
        head.append(f"  restarts {st.restarts}", style=pal.accent2)
    if st is not None and st.adopted:
        head.append("  adopted", style=pal.muted)
    if spec is not None:
        head.append(f"  gpu {fmt.gpus(spec.gpus)} :{spec.port}  ", style=pal.accent)
        head.append(spec.model)
        seqs, default = max_seqs(view, store)
        head.append(
            f"  max-num-seqs {fmt.num(seqs)}" + (" (vLLM default)" if default else ""), style=pal.muted
        )
    head.truncate(width)
    lines = [head]
    routed = router_line(view, store)  # a router: what it routed, its errors and retries
    if routed is not None:
        lines.append(Text(routed, style=pal.muted))
        lines[-1].truncate(width)
    if view.state in (State.FAILED, State.CRASHED, State.BACKOFF) and st is not None and st.last_error:
        err = Text(st.last_error, style=pal.bad)
        err.truncate(width)
        lines.append(err)
        if view.problems:
            hint = Text(f"{len(view.problems)} problem(s) diagnosed, press enter for fixes", style=pal.warn)
            hint.truncate(width)
            lines.append(hint)
    elif view.runtime_problems:
        problem = view.runtime_problems[0]
        line = Text("KV SHORT: ", style=pal.bad + pal.bold)
        line.append(f"{problem.message}; press enter for fixes", style=pal.warn)
        line.truncate(width)
        lines.append(line)
    return lines


def pane_text(view: InstanceView, store: Store, now: float, width: int, height: int, pal: Palette) -> Text:
    return Text("\n").join(pane_lines(view, store, now, width, height, pal))


def pane_lines(
    view: InstanceView, store: Store, now: float, width: int, height: int, pal: Palette
) -> list[Text]:
    """The pane's lines: the head (`head_lines`), then the labelled sparklines the height allows."""
    lines = head_lines(view, store, now, width, pal)
    room = height - len(lines)
    history = view.history
    router = view.spec is not None and view.spec.engine == "router"  # its samples hold none of these
    if room >= 2 and history and view.state in (State.READY, State.UNHEALTHY) and not router:
        plot_w = max(8, width - LABEL_W - 1)
        recent = [history[i] for i in range(max(0, len(history) - plot_w), len(history))]
        shown = [s for s in SERIES if s[0] not in ("waiting", "prompt tok/s")] if room < 12 else list(SERIES)
        shown = shown[: max(1, (room - 1))]
        rows = max(1, min(3, (room - 1) // len(shown)))
        span = fmt.duration(recent[-1].at - recent[0].at) if len(recent) > 1 else "0s"
        lines.append(Text(f"{'history':<{LABEL_W}} last {span}, newest at the right", style=pal.muted))
        latest = history[-1]
        seqs, _ = max_seqs(view, store)
        for label, key, show in shown:
            values = [key(s) for s in recent]
            known = [v for v in values if v is not None]
            top = 1.0 if label == "KV cache" else float(seqs) if label == "running" and seqs else None
            top = max([*known, top or 0.0]) if known or top else None
            plot = spark_rows(values, plot_w, rows, top)
            for r, row in enumerate(plot):
                if r == 0:
                    text = Text(f"{label:<12}{show(key(latest)):>7} ", style=pal.bold)
                elif r == len(plot) - 1:
                    text = Text(f"{'top ' + show(top):>{LABEL_W - 1}} ", style=pal.muted)
                else:
                    text = Text(" " * LABEL_W)
                text.append(row, style=pal.accent)
                lines.append(text)
    return lines[:height]


_NULL = Style()


class InstancePane(Widget):
    """Repainted once per render pass for the selected instance only. Drawn through the Line API: its
    lines, each cut to the width, become strips straight from their spans (Textual's path for a Rich
    Text, a Content to wrap and format, cost 4 ms a redraw: a tenth of the dashboard's CPU at 8
    instances, `benchmarks/bench_ui_breakdown.py`)."""

    DEFAULT_CSS = "InstancePane { height: 1fr; padding: 0 1; }"

    def __init__(self) -> None:
        super().__init__(id="instance-pane")
        self._lines: list[Text] = []
        self._key: tuple | None = None
        self._at = float("-inf")
        self._strips: list[Strip | None] = []
        self._strips_key: tuple | None = None
        self._sums: dict[tuple[int, ...], tuple[Style, ...]] = {}

    def update_view(self, view: InstanceView | None, store: Store, now: float) -> None:
        """Redrawn when the instance, its state or problems, the size or theme change, else at most every
        PANE_EVERY_S (its sparklines move with every sample)."""
        width, height = self.content_size.width or 78, self.content_size.height or 6
        key = (
            view.name if view else None,
            view.status if view else None,
            len(view.problems) + len(view.runtime_problems) if view else 0,
            view.sample is None if view else True,  # the first sample draws at once
            width,
            height,
            self.app.theme,
        )
        if key == self._key and 0 <= now - self._at < PANE_EVERY_S:
            return
        self._key, self._at = key, now
        lines = pane_lines(view, store, now, width, height, palette_of(self.app)) if view else [Text()]
        old, self._lines = self._lines, lines
        if len(lines) != len(old) or len(self._strips) != len(lines):
            self._strips = [None] * len(lines)
            self.refresh()
            return
        dirty = [y for y, (a, b) in enumerate(zip(lines, old, strict=True)) if a != b]
        for y in dirty:
            self._strips[y] = None
        if dirty:  # the lines that changed only (a label, a "top" line, a blank one often stays)
            self.refresh(Region(0, dirty[0], self.size.width, dirty[-1] - dirty[0] + 1))

    def render_line(self, y: int) -> Strip:
        base = self.visual_style.rich_style
        key = (self.content_size.width, base)
        if key != self._strips_key:
            self._strips_key, self._strips = key, [None] * len(self._lines)
        if not 0 <= y < len(self._lines):
            return Strip.blank(self.size.width, base)
        strip = self._strips[y]
        if strip is None:
            strip = self._strips[y] = self._draw_line(self._lines[y], base)
        return strip

    def _style(self, base: Style, *parts: Style) -> Style:
        """base + parts, remembered by identity (the palette's styles are the same objects each redraw;
        Rich's own sum compares styles field by field)."""
        key = (id(base), *map(id, parts))
        hit = self._sums.get(key)
        if hit is None:
            if len(self._sums) > 256:
                self._sums.clear()
            combined = base
            for part in parts:
                if part:
                    combined = combined + part
            hit = self._sums[key] = (combined, base, *parts)  # holding them keeps their ids theirs
        return hit[0]

    def _draw_line(self, line: Text, base: Style) -> Strip:
        """One line as segments of the widget's style plus the line's and each span's: straight from the
        spans where they follow one another (as `Text.append` leaves them), else through Rich."""
        plain, line_style = line.plain, line.style or _NULL
        width = self.content_size.width
        segments: list[Segment] = []
        pos = 0
        if not plain:  # an empty pane (no instance selected): one empty segment, as Rich renders it
            return Strip([Segment("", base)]).crop(0, width)
        if isinstance(line_style, Style):
            under = self._style(base, line_style)
            for start, end, style in line.spans:
                if start < pos or not isinstance(style, Style):
                    break
                if start > pos:
                    segments.append(Segment(plain[pos:start], under))
                segments.append(Segment(plain[start:end], self._style(base, line_style, style)))
                pos = end
            else:
                if pos < len(plain):
                    segments.append(Segment(plain[pos:], under))
                length = len(plain) if plain.isascii() else cell_len(plain)
                strip = Strip(segments, length)
                return strip.crop(0, width) if length > width else strip
        segments = [  # overlapping spans, a style by name: Rich resolves them
            Segment(
                seg.text,
                self._style(base, line_style if isinstance(line_style, Style) else Style(), seg.style)
                if seg.style
                else base,
            )
            for seg in line.render(self.app.console, end="")
        ]
        return Strip(segments).crop(0, width)
