"""One instance at a glance: state (STARTING phase as progress), KV gauge, load, latency, a sparkline."""

from __future__ import annotations

from collections.abc import Callable

from rich.color import Color
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from vtui.core.state import Phase, State
from vtui.ui import fmt
from vtui.ui.store import InstanceView

STATE_STYLE = {
    State.READY: "bold green",
    State.STARTING: "bold yellow",
    State.UNHEALTHY: "bold dark_orange",
    State.STOPPING: "yellow",
    State.STOPPED: "dim",
    State.CRASHED: "bold red",
    State.BACKOFF: "bold magenta",
    State.FAILED: "bold red",
    State.ASLEEP: "bold blue",
    State.WAKING: "blue",
}
SPARK_POINTS = 40
SPARK_EVERY_S = 3.0  # the sparkline (40 points of history) repaints at most this often: a 2-row plot
# re-rendered every second cost as much as the card's text


def state_text(view: InstanceView, now: float) -> Text:
    """`READY up 3m r0`, or `STARTING [###...] loading weights`, or `BACKOFF retry in 4s`."""
    st = view.status
    state = view.state
    text = Text(f"{state.name:<9}", style=STATE_STYLE.get(state, ""))
    if st is None:
        return text
    if state == State.STARTING:
        step = st.phase.rank + 1 if st.phase is not None else 0
        text.append(f"[{fmt.bar(step / len(Phase), 6)}] {st.phase.value if st.phase else 'spawning'}")
    elif state == State.BACKOFF and st.next_restart_at is not None:
        text.append(f"retry in {fmt.duration(max(0.0, st.next_restart_at - now))}")
    elif state in (State.READY, State.UNHEALTHY):
        up = now - st.started_at if st.started_at is not None else None
        text.append(f"up {fmt.uptime(up)}")
    if st.restarts:
        text.append(f"  r{st.restarts}", style="magenta")
    if st.adopted:
        text.append("  adopted", style="dim")
    return text


def card_lines(
    view: InstanceView, now: float, width: int, hint: bool = True, name_width: int = 14
) -> list[Text]:
    """The card's lines, each cut to `width` (3 for a running instance; the error and a hint otherwise)."""
    spec = view.spec
    s = view.sample
    head = Text()
    head.append(f"{view.name[:name_width]:<{name_width}} ", style="bold")
    head.append_text(state_text(view, now))
    if view.runtime_problems and view.state in (State.READY, State.UNHEALTHY):
        head.append("  KV SHORT", style="bold red")  # the detail screen says why and what to change
    if spec is not None:
        where = f"  gpu {fmt.gpus(spec.gpus)} :{spec.port}  "
        room = max(8, width - head.cell_len - len(where))
        model = spec.model if len(spec.model) <= room else "..." + spec.model[-(room - 3) :]
        head.append(where, style="cyan")
        head.append(model, style="dim")
    head.truncate(width)
    lines = [head]
    if view.state in (State.FAILED, State.CRASHED, State.BACKOFF) and view.status and view.status.last_error:
        err = Text("  " + view.status.last_error, style="red")
        err.truncate(width)
        lines.append(err)
        if view.problems and hint:
            hint_line = Text(
                f"  {len(view.problems)} problem(s) diagnosed, press enter for fixes", style="yellow"
            )
            hint_line.truncate(width)
            lines.append(hint_line)
        return lines
    kv = s.kv_usage if s else None
    cap = s.kv_capacity_tokens if s else None
    used = kv * cap if kv is not None and cap is not None else None
    max_seqs = spec.flags.get("max-num-seqs") if spec else None
    l2 = Text("  KV ")
    l2.append(f"[{fmt.bar(kv, 12)}]", style="red" if kv is not None and kv > 0.9 else "green")
    l2.append(f" {fmt.pct(kv):>4} {fmt.tokens(used)}/{fmt.tokens(cap)} tok")
    l2.append(
        f"  run {fmt.num(s.running if s else None)}/{fmt.flag_value(max_seqs) if max_seqs else fmt.DASH}"
    )
    l2.append(f" wait {fmt.num(s.waiting if s else None)}", style="yellow" if s and s.waiting else "")
    l2.truncate(width)
    ttft = s.ttft if s else None
    l3 = Text(
        f"  tok/s p {fmt.rate(s.prompt_tps if s else None)} g {fmt.rate(s.generation_tps if s else None)}"
        f"  TTFT {fmt.seconds(ttft.p50 if ttft else None)}/{fmt.seconds(ttft.p95 if ttft else None)}"
        f"  pre/s {fmt.num(s.preemptions_per_s if s else None, '.1f')}"
        f"  hit {fmt.pct(s.prefix_hit_rate if s else None)}"
    )
    l3.truncate(width)
    return [*lines, l2, l3]


def card_text(view: InstanceView, now: float, width: int, hint: bool = True, name_width: int = 14) -> Text:
    return Text("\n").join(card_lines(view, now, width, hint, name_width))


def spark_data(
    view: InstanceView, key: Callable = lambda s: s.generation_tps, points: int = SPARK_POINTS
) -> list[float]:
    values = [key(s) for s in list(view.history)[-points:]]
    return [v if v is not None else 0.0 for v in values] or [0.0]


SPARK_WIDTH = 16  # columns of the sparkline at the right of lines 2-3
CARD_LINES = 3
PLOT_ROWS = (1, 2)  # the lines the sparkline shares


BARS = "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"  # Textual's Sparkline glyphs


def _blend(low: Color, high: Color, ratio: float) -> Color:
    if low.triplet is None or high.triplet is None:
        return high
    (r1, g1, b1), (r2, g2, b2) = low.triplet, high.triplet
    return Color.from_rgb(r1 + (r2 - r1) * ratio, g1 + (g2 - g1) * ratio, b1 + (b2 - b1) * ratio)


def spark_strips(
    data: list[float], width: int, height: int, low: Color, high: Color, base: RichStyle, pad: RichStyle
) -> list[Strip]:
    """What Textual's Sparkline renderable draws (the max of each bucket, its colour blended from `low`
    to `high` by its height), built straight as strips: the same cells at a third of the cost of a
    console pass (tests/ui checks the two agree)."""
    n = len(data)
    if n < 2:  # as the renderable: a flat bar
        return [Strip([Segment(BARS[-1] * width, base + RichStyle(color=high))], width)] * height
    levels, lo = len(BARS), min(data)
    top, extent = levels * height - 1, (max(data) - lo) or 1
    buckets = [b for b in (data[n * i // width : n * (i + 1) // width] for i in range(width)) if b]
    step = len(buckets) / width
    ratios = [(max(buckets[int(i * step)]) - lo) / extent for i in range(width)]
    styles: dict[float, RichStyle] = {}
    rows = []
    for row in reversed(range(height)):
        floor, ceiling = row * levels, (row + 1) * levels
        cells = []
        for ratio in ratios:
            index = int(ratio * top)
            if index < floor:
                cells.append(Segment(" ", base))
                continue
            style = styles.get(ratio)
            if style is None:
                style = styles[ratio] = base + RichStyle.from_color(_blend(low, high, ratio))
            cells.append(Segment(BARS[-1] if index >= ceiling else BARS[index % levels], style))
        rows.append(Strip(cells, width).extend_cell_length(width, pad))
    return rows


class InstanceCard(Widget):
    """A 3-line card drawn as one widget through the Line API: the text from Rich segments and the
    sparkline (Textual's Sparkline renderable, coloured as the Sparkline widget) beside lines 2-3.

    One widget instead of a container + text + Sparkline, and only the lines whose text changed are
    marked dirty: the compositor repaints just those, and each line's strip is cached until its text,
    the plot, the width or the style changes. `selected` is shown by a CSS class set by the dashboard."""

    COMPONENT_CLASSES = {"sparkline--max-color", "sparkline--min-color"}
    DEFAULT_CSS = """
    InstanceCard > .sparkline--max-color { color: $primary; }
    InstanceCard > .sparkline--min-color { color: $primary 30%; }
    """

    def __init__(self, name: str, name_width: int = 14) -> None:
        super().__init__(classes="card")
        self.instance = name
        self.name_width = self.full_name_width = name_width
        self._view: InstanceView | None = None
        self._now = 0.0
        self._spark_at: float | None = None
        self.spark_every = SPARK_EVERY_S
        self.lines: list[Text] = []
        self.spark: list[float] | None = None  # None: no plot (not READY, or all zeros)
        self._strips: list[Strip | None] = [None] * CARD_LINES
        self._strips_key: tuple | None = None
        self._plot: list[Strip] = []
        self._plot_key: tuple | None = None

    @property
    def composed(self) -> bool:
        return self.is_attached

    @property
    def text(self) -> Text:
        return Text("\n").join(self.lines)

    def update_view(self, view: InstanceView, now: float) -> None:
        self._view = view
        self._now = now
        width = max(20, self.size.width - 18) if self.size.width else 60
        lines = card_lines(view, now, width, name_width=self.name_width)
        spark = self.spark
        if view.state not in (State.READY, State.UNHEALTHY):
            spark = None
        elif spark is None or self._spark_at is None or not 0 <= now - self._spark_at < self.spark_every:
            self._spark_at = now
            data = spark_data(view)
            spark = data if any(data) else None
        if len(lines) != len(self.lines) or (spark is None) != (self.spark is None):
            dirty = list(range(CARD_LINES))  # the text/plot split moved: every line
        else:
            dirty = [y for y, (a, b) in enumerate(zip(lines, self.lines, strict=True)) if a != b]
            if spark != self.spark:
                dirty = sorted({*dirty, *PLOT_ROWS})
        self.lines, self.spark = lines, spark
        if len(dirty) == CARD_LINES or not self.size.width:
            self._strips = [None] * CARD_LINES
            self.refresh()
        elif dirty:
            for y in dirty:
                self._strips[y] = None
            width = self.content_size.width
            self.refresh(*(Region(0, y, width, 1) for y in dirty))

    def render(self) -> Text:
        return self.text

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        base = self.visual_style.rich_style
        key = (width, base)
        if key != self._strips_key:
            self._strips = [None] * CARD_LINES
            self._strips_key = key
        if not 0 <= y < CARD_LINES:
            return Strip.blank(width, base)
        strip = self._strips[y]
        if strip is None:
            strip = self._strips[y] = self._render_line(y, width, base)
        return strip

    def _render_line(self, y: int, width: int, base: RichStyle) -> Strip:
        """One line: its Text rendered to segments directly (no wrapping pass: the text is already cut
        to the card), the card's style under it, padded with the background; the plot at the right."""
        pad = RichStyle(bgcolor=base.bgcolor)  # padding as Textual pads: the background only
        text_w = width - SPARK_WIDTH if self.spark is not None and width > SPARK_WIDTH else width
        if y < len(self.lines):
            segments = list(self.lines[y].render(self.app.console))
            strip = Strip(segments).crop(0, text_w).apply_style(base).extend_cell_length(text_w, pad)
        else:
            strip = Strip.blank(text_w, pad)
        if text_w == width:
            return strip
        plot_key = (self.spark, base)
        if plot_key != self._plot_key:  # the plot moves every few seconds, the text every second
            self._plot_key, self._plot = plot_key, self._render_plot(base, pad)
        return Strip.join([strip, self._plot[y]])

    def _render_plot(self, base: RichStyle, pad: RichStyle) -> list[Strip]:
        _, back = self.background_colors
        low = (back + self.get_component_styles("sparkline--min-color").color).rich_color
        high = (back + self.get_component_styles("sparkline--max-color").color).rich_color
        assert self.spark is not None
        return [
            Strip.blank(SPARK_WIDTH, pad),
            *spark_strips(self.spark, SPARK_WIDTH, 2, low, high, base, pad),
        ]

    def on_resize(self) -> None:
        if self._view is not None:
            self.lines = []  # every line again at the new width
            self.update_view(self._view, self._now)
