"""One instance at a glance: state (STARTING phase as progress), KV gauge, load, latency, a sparkline."""

from __future__ import annotations

from collections.abc import Callable

from rich.style import Style as RichStyle
from rich.text import Text
from textual.renderables.sparkline import Sparkline as SparklineRenderable
from textual.strip import Strip
from textual.widget import Widget

from vtui.core.state import Phase, State
from vtui.ui import fmt
from vtui.ui.store import InstanceView

STATE_STYLE = {
    State.READY: "bold green", State.STARTING: "bold yellow", State.UNHEALTHY: "bold dark_orange",
    State.STOPPING: "yellow", State.STOPPED: "dim", State.CRASHED: "bold red", State.BACKOFF: "bold magenta",
    State.FAILED: "bold red",
}
SPARK_POINTS = 40
SPARK_EVERY_S = 3.0  # the sparkline (40 points of history) repaints at most this often: a 2-row plot
                     # re-rendered every second cost as much as the card's text


def state_text(view: InstanceView, now: float) -> Text:
    """`READY up 3m05s r0`, or `STARTING [###...] loading weights`, or `BACKOFF retry in 4s`."""
    st = view.status
    state = view.state
    text = Text(f"{state.name:<9}", style=STATE_STYLE.get(state, ""))
    if st is None:
        return text
    if state == State.STARTING:
        phases = list(Phase)
        step = phases.index(st.phase) + 1 if st.phase in phases else 0
        text.append(f"[{fmt.bar(step / len(phases), 6)}] {st.phase.value if st.phase else 'spawning'}")
    elif state == State.BACKOFF and st.next_restart_at is not None:
        text.append(f"retry in {fmt.duration(max(0.0, st.next_restart_at - now))}")
    elif state in (State.READY, State.UNHEALTHY):
        up = now - st.started_at if st.started_at is not None else None
        text.append(f"up {fmt.duration(up)}")
    if st.restarts:
        text.append(f"  r{st.restarts}", style="magenta")
    if st.adopted:
        text.append("  adopted", style="dim")
    return text


def card_text(view: InstanceView, now: float, width: int, hint: bool = True, name_width: int = 14) -> Text:
    spec = view.spec
    s = view.sample
    head = Text()
    head.append(f"{view.name[:name_width]:<{name_width}} ", style="bold")
    head.append_text(state_text(view, now))
    if spec is not None:
        where = f"  gpu {fmt.gpus(spec.gpus)} :{spec.port}  "
        room = max(8, width - head.cell_len - len(where))
        model = spec.model if len(spec.model) <= room else "..." + spec.model[-(room - 3):]
        head.append(where, style="cyan")
        head.append(model, style="dim")
    head.truncate(width)
    lines = [head]
    if view.state in (State.FAILED, State.CRASHED, State.BACKOFF) and view.status and view.status.last_error:
        err = Text("  " + view.status.last_error, style="red")
        err.truncate(width)
        lines.append(err)
        if view.problems and hint:
            hint = Text(f"  {len(view.problems)} problem(s) diagnosed, press enter for fixes", style="yellow")
            hint.truncate(width)
            lines.append(hint)
        return Text("\n").join(lines)
    kv = s.kv_usage if s else None
    cap = s.kv_capacity_tokens if s else None
    used = kv * cap if kv is not None and cap is not None else None
    max_seqs = spec.flags.get("max-num-seqs") if spec else None
    l2 = Text("  KV ")
    l2.append(f"[{fmt.bar(kv, 12)}]", style="red" if kv is not None and kv > 0.9 else "green")
    l2.append(f" {fmt.pct(kv):>4} {fmt.tokens(used)}/{fmt.tokens(cap)} tok")
    l2.append(f"  run {fmt.num(s.running if s else None)}/{fmt.flag_value(max_seqs) if max_seqs else fmt.DASH}")
    l2.append(f" wait {fmt.num(s.waiting if s else None)}",
              style="yellow" if s and s.waiting else "")
    l2.truncate(width)
    ttft = s.ttft if s else None
    l3 = Text(f"  tok/s p {fmt.rate(s.prompt_tps if s else None)} g {fmt.rate(s.generation_tps if s else None)}"
              f"  TTFT {fmt.seconds(ttft.p50 if ttft else None)}/{fmt.seconds(ttft.p95 if ttft else None)}"
              f"  pre/s {fmt.num(s.preemptions_per_s if s else None, '.1f')}"
              f"  hit {fmt.pct(s.prefix_hit_rate if s else None)}")
    l3.truncate(width)
    return Text("\n").join([*lines, l2, l3])


def spark_data(view: InstanceView, key: Callable = lambda s: s.generation_tps, points: int = SPARK_POINTS) -> list[float]:
    values = [key(s) for s in list(view.history)[-points:]]
    return [v if v is not None else 0.0 for v in values] or [0.0]


SPARK_WIDTH = 16  # columns of the sparkline at the right of lines 2-3


class InstanceCard(Widget):
    """A 3-line card drawn as one widget through the Line API: the text from Rich segments and the
    sparkline (Textual's Sparkline renderable, coloured as the Sparkline widget) beside lines 2-3.

    One widget instead of a container + text + Sparkline: the compositor repaints one region per card
    per second, and the strips are cached until the text, the plot, the width or the style changes.
    `selected` is shown by a CSS class set by the dashboard."""

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
        self.spark_every = SPARK_EVERY_S  # 0: every update (deterministic snapshots)
        self.text = Text()
        self.spark: list[float] | None = None  # None: no plot (not READY, or all zeros)
        self._strips: list[Strip] = []
        self._strips_key: tuple | None = None
        self._plot: list[Strip] = []
        self._plot_key: tuple | None = None

    @property
    def composed(self) -> bool:
        return self.is_attached

    def update_view(self, view: InstanceView, now: float) -> None:
        self._view = view
        self._now = now
        width = max(20, self.size.width - 18) if self.size.width else 60
        text = card_text(view, now, width, name_width=self.name_width)
        spark = self.spark
        if view.state not in (State.READY, State.UNHEALTHY):
            spark = None
        elif spark is None or self._spark_at is None or not 0 <= now - self._spark_at < self.spark_every:
            self._spark_at = now
            data = spark_data(view)
            spark = data if any(data) else None
        if text != self.text or spark != self.spark:
            self.text, self.spark = text, spark
            self._strips_key = None
            self.refresh()

    def render(self) -> Text:
        return self.text

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        base = self.visual_style.rich_style
        key = (width, base)
        if key != self._strips_key:
            self._strips = self._render_strips(width, base)
            self._strips_key = key
        return self._strips[y] if 0 <= y < len(self._strips) else Strip.blank(width, base)

    def _render_strips(self, width: int, base: RichStyle) -> list[Strip]:
        console = self.app.console
        pad = RichStyle(bgcolor=base.bgcolor)  # padding as Textual pads: the background only
        text_w = width - SPARK_WIDTH if self.spark is not None and width > SPARK_WIDTH else width
        options = console.options.update(width=text_w, no_wrap=True, overflow="crop", height=None)
        lines = [Strip(line).extend_cell_length(text_w, pad)
                 for line in console.render_lines(self.text, options, style=base, pad=False)]
        lines += [Strip.blank(text_w, pad)] * (3 - len(lines))
        if text_w == width:
            return lines[:3]
        plot_key = (self.spark, base)
        if plot_key != self._plot_key:  # the plot moves every few seconds, the text every second
            self._plot_key, self._plot = plot_key, self._render_plot(base, pad)
        return [Strip.join([line, extra]) for line, extra in zip(lines[:3], self._plot, strict=True)]

    def _render_plot(self, base: RichStyle, pad: RichStyle) -> list[Strip]:
        console = self.app.console
        _, back = self.background_colors
        plot = SparklineRenderable(
            self.spark, width=SPARK_WIDTH, height=2,
            min_color=(back + self.get_component_styles("sparkline--min-color").color).rich_color,
            max_color=(back + self.get_component_styles("sparkline--max-color").color).rich_color)
        plot_opts = console.options.update(width=SPARK_WIDTH, height=2, no_wrap=True, overflow="crop")
        plot_lines = [Strip(line).extend_cell_length(SPARK_WIDTH, pad)
                      for line in console.render_lines(plot, plot_opts, style=base, pad=False)][:2]
        plot_lines += [Strip.blank(SPARK_WIDTH, pad)] * (2 - len(plot_lines))
        return [Strip.blank(SPARK_WIDTH, pad), *plot_lines]

    def on_resize(self) -> None:
        if self._view is not None:
            self.update_view(self._view, self._now)
