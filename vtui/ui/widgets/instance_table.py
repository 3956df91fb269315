"""The fleet table: one aligned row per instance and an ALL row for the session, drawn through the Line
API (a custom widget, not Textual's DataTable: see `benchmarks/bench_ui.py` in the README for the cost).
A replica group's router row is the group's ALL row: its replicas' load summed, percentiles of their
merged histograms, and in UP/PHASE the slow or hot replica (`telemetry.replica_group`), else how many are up.

Columns have fixed widths that depend only on the terminal width and the instance names, never on the
values, so nothing moves between frames. The narrower the terminal, the more low-priority columns are
left out; from 80 to 300 columns the spare width goes to the KV bar and the trend. Only the rows whose
cells changed are repainted. Sort (`<` `>` `I`, or a click on a header), filter (`/`), select (keys,
click; double-click opens the detail screen).
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from vtui.core.state import State
from vtui.ui import fmt
from vtui.ui.store import Store
from vtui.ui.widgets.instance_rows import (  # noqa: F401 (the rows' names, imported from here by tests)
    BY_KEY,
    COLUMNS,
    HOST_COLUMN,
    HOST_LOST,
    LOCAL,
    PHASE_SHORT,
    SORTABLE,
    STATE_LABEL,
    STATE_ORDER,
    TREND_EVERY_S,
    Column,
    RowData,
    all_row,
    gpu_list,
    group_row,
    layout_columns,
    max_seqs,
    row_data,
)
from vtui.ui.widgets.palette import Palette, bar, level_mark, palette_of, spark

Cell = tuple[tuple[str, Style | None], ...]  # a column's parts: text, style (None: the row's)
_BOLD = Style(bold=True)


def _cells(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def _strip(segments: list[Segment], length: int, width: int, fill: Style) -> Strip:
    """The segments (`length` cells) as a strip of exactly `width` cells: cut, or padded with `fill`."""
    if length > width:
        return Strip(segments, length).crop(0, width)
    if length < width:
        segments.append(Segment(" " * (width - length), fill))
    return Strip(segments, width)


def _fit(text: str, width: int, right: bool) -> str:
    if len(text) > width:
        return text[: width - 1] + "~" if width > 1 else text[:width]
    return text.rjust(width) if right else text.ljust(width)


def row_cells(row: RowData, columns: list[tuple[Column, int]], pal: Palette, is_all: bool) -> list[Cell]:
    """The row as one cell per column, each cut or padded to its column's width."""
    cells: list[Cell] = []
    bold = pal.bold if is_all else None
    for col, w in columns:
        key = col.key
        style: Style | None = bold
        if key == "name":
            text, style = row.label or row.name, pal.bold
        elif key == "host":
            text = row.host if not is_all else ""
            style = (pal.bad + pal.bold) if row.host_lost else pal.muted if row.host == LOCAL else pal.accent
        elif key == "state":
            if is_all:
                text = row.state_label
            else:
                text = STATE_LABEL.get(row.state, row.state.name) if row.state else fmt.DASH
                style = pal.state(row.state) if row.state else None
        elif key == "phase":
            text = row.phase
            style = {"bad": pal.bad + pal.bold, "warn": pal.warn, "": pal.muted}.get(row.phase_style)
        elif key == "gpu":
            text, style = row.gpu, pal.accent
        elif key == "port":
            text, style = (str(row.port) if row.port else ""), pal.accent
        elif key == "kv":
            filled, empty = bar(row.kv, w)
            cells.append(((filled, pal.level(row.kv)), (empty, pal.empty)))
            continue
        elif key == "kvpct":
            text = fmt.pct(row.kv) + level_mark(row.kv) if row.kv is not None else fmt.DASH
            style = pal.level(row.kv) if row.kv is not None and row.kv >= 0.75 else bold
        elif key == "kvtok":
            text = f"{fmt.tokens(row.kv_used)}/{fmt.tokens(row.kv_cap)}"
        elif key == "run":
            cap = fmt.num(row.max_seqs) if row.max_seqs else fmt.DASH
            text = f"{fmt.num(row.running)}/{cap}"
        elif key == "wait":
            text = fmt.num(row.waiting)
            style = pal.warn if row.waiting else bold
        elif key == "ptps":
            text = fmt.rate(row.ptps)
        elif key == "gtps":
            text = fmt.rate(row.gtps)
        elif key in ("ttft50", "ttft95", "itl95"):
            text = fmt.seconds(getattr(row, key))
        elif key == "pre":
            text = fmt.num(row.pre, ".1f")
            style = pal.bad if row.pre else bold
        elif key == "hit":
            text = fmt.pct(row.hit)
        elif key == "trend":
            text, style = spark(list(row.trend), w) if row.trend else "", pal.accent
        else:  # pragma: no cover - every column is handled above
            text = ""
        cells.append(((_fit(text, w, col.right), style),))
    return cells


class FleetTable(Widget, can_focus=False):
    """The table (header, instance rows, ALL row); rows scroll under a fixed header and ALL row."""

    DEFAULT_CSS = "FleetTable { height: auto; }"  # colours: palette.py, from the theme

    class Selected(Message):
        def __init__(self, name: str, open_detail: bool = False) -> None:
            super().__init__()
            self.name, self.open_detail = name, open_detail

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.sort_key: str | None = None  # None: the layout's order
        self.reverse = False
        self.filter = ""
        self.selected: str | None = None
        self.names: list[str] = []  # the rows shown, in order (after sort and filter)
        self.first_row = 0  # first row shown (rows scroll under the header)
        self._rows: dict[str, RowData] = {}
        self._all: RowData | None = None
        self._lines: list[tuple] = []  # each line's cells (and selection), compared to repaint changes
        self._strips: list[Strip | None] = []
        self._strips_key: tuple | None = None
        self._pal: Palette | None = None
        self._pad = Style()
        self._sums: dict[tuple[Style, Style], Style] = {}
        self._columns: list[tuple[Column, int]] = []
        self._layout_key: tuple | None = None
        self._name_width = 8
        self._host_width = 0  # 0: no HOST column (this machine only)
        self._count = 0
        self._trend_at = float("-inf")
        self._trend_w = 0

    # -- data ------------------------------------------------------------------------------------
    def set_names(self, names: list[str]) -> None:
        shown = [n.split(":", 1)[-1] for n in names]  # another host's `gpu2:chat` shows as `chat`
        self._name_width = max(8, min(24, max((len(n) for n in shown), default=8)))
        self._count = len(names)
        self._layout_key = None
        if self.selected not in names:
            self.selected = names[0] if names else None
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return self._count + 2

    def update_from(self, store: Store, now: float) -> None:
        """Rebuild the rows from the store (once per render pass) and repaint the lines that changed."""
        if len(store.views) != self._count:  # instances that appeared since (adopted, another host's)
            self.set_names(list(store.views))
        host_width = max([len(LOCAL), *(len(h) for h in store.hosts)]) if store.hosts else 0
        if host_width != self._host_width:
            self._host_width, self._layout_key = min(host_width, 16), None
        width = self.content_size.width or 80
        columns = self._layout(width)
        trend_w = next((w for c, w in columns if c.key == "trend"), 0)
        redraw_trend = not 0 <= now - self._trend_at < TREND_EVERY_S or self._trend_w != trend_w
        old = self._rows
        fresh = {n for n, v in store.views.items() if redraw_trend or n not in old or not old[n].trend}
        self._rows = {
            name: row_data(view, store, now, trend_w if name in fresh else 0)
            for name, view in store.views.items()
        }
        if redraw_trend:
            self._trend_at, self._trend_w = now, trend_w
        for name, row in self._rows.items():  # the trends move every few seconds, the numbers every second
            if name not in fresh and row.state in (State.READY, State.UNHEALTHY):
                row.trend = old[name].trend
        for name, row in self._rows.items():
            spec = store.views[name].spec
            if spec is not None and spec.engine == "router" and spec.group:
                group_row(row, spec.group, store, self._rows)
        rows = list(self._rows.values())
        self._all = all_row([r for r in rows if not r.aggregate])  # a group's replicas count once
        ready = sum(1 for r in rows if r.state in (State.READY, State.UNHEALTHY))
        self._all.state_label = f"{ready}/{len(rows)} up"  # routers are instances too
        shown = [r for r in rows if self._matches(r)]
        if self.sort_key is not None:
            key = self.sort_key
            known = [r for r in shown if r.sort_value(key) is not None]
            unknown = [r for r in shown if r.sort_value(key) is None]
            known.sort(key=lambda r: r.sort_value(key), reverse=self.reverse)  # type: ignore[arg-type,return-value]
            shown = known + unknown  # unknown values last, either way
        self.names = [r.name for r in shown]
        if self.selected not in self.names and self.names:
            self.selected = self.names[0]
        self._repaint()

    def _matches(self, row: RowData) -> bool:
        if not self.filter:
            return True
        needle = self.filter.lower()
        state = row.state.name.lower() if row.state else ""
        return (
            needle in row.name.lower()
            or needle in row.model.lower()
            or needle in state
            or needle in row.host.lower()
        )

    def _layout(self, width: int) -> list[tuple[Column, int]]:
        key = (width, self._name_width, self._host_width)
        if key != self._layout_key:
            self._layout_key = key
            self._columns = layout_columns(width, self._name_width, self._host_width)
        return self._columns

    # -- selection and sorting ---------------------------------------------------------------------
    def move(self, delta: int) -> str | None:
        if not self.names:
            return None
        i = self.names.index(self.selected) if self.selected in self.names else 0
        self.selected = self.names[(i + delta) % len(self.names)]
        self._repaint()
        return self.selected

    def select(self, name: str) -> None:
        self.selected = name
        self._repaint()

    def sort_by(self, key: str | None, reverse: bool | None = None) -> None:
        if key == "kv":
            key = "kvpct"
        if reverse is None:
            reverse = (
                (not self.reverse)
                if key == self.sort_key
                else key not in ("name", "host", "state", "gpu", "port")
            )
        self.sort_key, self.reverse = key, reverse

    def cycle_sort(self, delta: int) -> None:
        keys: list[str | None] = [None, *[k for k in SORTABLE if k in {c.key for c, _ in self._columns}]]
        i = keys.index(self.sort_key) if self.sort_key in keys else 0
        self.sort_by(keys[(i + delta) % len(keys)])

    # -- drawing -----------------------------------------------------------------------------------
    def _visible_rows(self) -> int:
        return max(1, (self.size.height or self._count + 2) - 2)

    def _repaint(self) -> None:
        if not self.is_attached:
            return
        pal = palette_of(self.app)
        columns = self._layout(self.content_size.width or 80)
        visible = self._visible_rows()
        if self.selected in self.names:
            i = self.names.index(self.selected)
            if i < self.first_row:
                self.first_row = i
            elif i >= self.first_row + visible:
                self.first_row = i - visible + 1
        self.first_row = max(0, min(self.first_row, max(0, len(self.names) - visible)))
        lines: list[tuple] = [("header", self.sort_key, self.reverse, tuple((c.key, w) for c, w in columns))]
        for name in self.names[self.first_row : self.first_row + visible]:
            row = self._rows.get(name)
            if row is not None:
                lines.append(("row", name == self.selected, tuple(row_cells(row, columns, pal, False))))
        while len(lines) < visible + 1:
            lines.append(("blank",))
        if self._all is not None:
            lines.append(("all", tuple(row_cells(self._all, columns, pal, True))))
        if len(lines) != len(self._lines):
            self._lines, self._strips = lines, [None] * len(lines)
            self.refresh()
            return
        dirty = [y for y, (a, b) in enumerate(zip(lines, self._lines, strict=True)) if a != b]
        self._lines = lines
        width = self.content_size.width
        for y in dirty:
            self._strips[y] = None
        if dirty:  # one region from the first to the last changed line: the compositor renders a
            # widget once per region, so eight one-line regions cost eight passes
            self.refresh(Region(0, dirty[0], width, dirty[-1] - dirty[0] + 1))

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        base = self.visual_style.rich_style
        key = (width, base, self.app.theme)
        if key != self._strips_key:
            self._strips_key = key
            self._strips = [None] * len(self._lines)
            self._pal = palette_of(self.app)
            self._pad = Style(bgcolor=base.bgcolor)
            self._sums = {}
        if not 0 <= y < len(self._lines):
            return Strip.blank(width, base)
        strip = self._strips[y]
        if strip is None:
            strip = self._strips[y] = self._draw_line(self._lines[y], width, base)
        return strip

    def _sum(self, row_style: Style, style: Style) -> Style:
        """row_style + style, remembered (a row adds the same few styles on every repaint)."""
        key = (row_style, style)
        combined = self._sums.get(key)
        if combined is None:
            combined = self._sums[key] = row_style + style
        return combined

    def _draw_line(self, line: tuple, width: int, base: Style) -> Strip:
        """One line as few segments as its styles allow: neighbouring parts of one style are one segment
        (a row is some 40 parts but 10-20 styles), which every later stage (Textual's styles cache, the
        colour filter, the compositor's cuts, the terminal write) pays for per segment."""
        kind = line[0]
        pad, pal = self._pad, self._pal
        assert pal is not None  # set by render_line, the only caller
        if kind == "blank":
            return Strip.blank(width, pad)
        if kind == "header":
            labels = ["  "]
            for col, w in self._columns:
                label = col.header
                if col.key == self.sort_key or (col.key == "kv" and self.sort_key == "kvpct"):
                    label = label + ("v" if self.reverse else "^")
                labels.append(_fit(label, w, col.right) + " ")
            text = "".join(labels)
            return _strip([Segment(text, self._sum(base, pal.header))], _cells(text), width, pad)
        if kind == "all":
            row_style = self._sum(base, pal.total)
            marker, cells = "  ", line[1]
        else:
            selected, cells = line[1], line[2]
            row_style = self._sum(base, pal.selected) if selected else base
            marker = "> " if selected else "  "
        segments: list[Segment] = []
        run: list[str] = [marker]
        run_style = self._sum(row_style, _BOLD)
        length = 0
        for cell in cells:
            for text, style in cell:
                if text:
                    style = self._sum(row_style, style) if style is not None else row_style
                    if style is not run_style:
                        joined = "".join(run)
                        segments.append(Segment(joined, run_style))
                        length += _cells(joined)
                        run, run_style = [], style
                    run.append(text)
            if run_style is not row_style:
                joined = "".join(run)
                segments.append(Segment(joined, run_style))
                length += _cells(joined)
                run, run_style = [], row_style
            run.append(" ")
        joined = "".join(run)
        segments.append(Segment(joined, run_style))
        length += _cells(joined)
        fill = pad if kind == "row" and not line[1] else row_style
        return _strip(segments, length, width, fill)

    # -- mouse ---------------------------------------------------------------------------------------
    def on_click(self, event: events.Click) -> None:
        y, x = event.y, event.x
        if y == 0:
            at = 2
            for col, w in self._columns:
                if at <= x < at + w + 1:
                    if col.key != "trend":
                        self.sort_by(col.key)
                        self.post_message(FleetTable.Selected(self.selected or "", False))
                    return
                at += w + 1
            return
        i = self.first_row + y - 1
        if 1 <= y <= self._visible_rows() and i < len(self.names):
            self.selected = self.names[i]
            self._repaint()
            self.post_message(FleetTable.Selected(self.selected, open_detail=event.chain >= 2))

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.move(1)
        if self.selected:
            self.post_message(FleetTable.Selected(self.selected))

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.move(-1)
        if self.selected:
            self.post_message(FleetTable.Selected(self.selected))

    def on_resize(self) -> None:
        self._layout_key = None
        self._lines = []
        self._repaint()
