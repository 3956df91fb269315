"""The dashboard's fleet table (columns, ALL row, sort, filter, mouse), the GPU panel's bars, themes and
the detail screen's plot window."""

from __future__ import annotations

import random

from vtui.core.state import State
from vtui.ui.messages import MetricsArrived
from vtui.ui.screens.detail import DetailScreen
from vtui.ui.textdump import screen_text
from vtui.ui.widgets.instance_table import COLUMNS, FleetTable, RowData, all_row, layout_columns, row_cells
from vtui.ui.widgets.palette import PLAIN, bar, level_mark


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


def test_columns_fill_80_to_300_and_keep_the_key_ones():
    for width in (80, 100, 120, 160, 200, 300):
        cols = layout_columns(width, 8)
        keys = [c.key for c, _ in cols]
        used = 2 + sum(w + 1 for _, w in cols)
        assert used <= width and {"name", "state", "kv", "kvpct", "run"} <= set(keys), width
        if width >= 160:
            assert used == width and keys == [c.key for c in COLUMNS]  # every column, no gap at the end
    assert dict((c.key, w) for c, w in layout_columns(300, 8))["kv"] == 24  # the KV bar's cap
    assert dict((c.key, w) for c, w in layout_columns(80, 8))["state"] >= len("UNHEALTHY")


def test_rows_never_move_whatever_the_values():
    """Every cell is cut or padded to its column: random values give the same cell widths each frame."""
    cols = layout_columns(200, 10)
    rng = random.Random(3)
    widths = set()
    for _ in range(200):
        row = RowData(
            rng.choice(["a", "a-very-long-instance-name"]),
            state=rng.choice(list(State)),
            phase=rng.choice(["", "up 3d04h r12", "KV SHORT"]),
            kv=rng.choice([None, 0.0, 0.5, 1.0]),
            kv_used=rng.choice([None, 5.0, 2e7]),
            kv_cap=rng.choice([None, 1e7]),
            running=rng.choice([None, 3.0, 12345.0]),
            max_seqs=rng.choice([None, 1024]),
            ptps=rng.choice([None, 1.5, 1e6]),
            ttft95=rng.choice([None, 0.01, 120.0]),
            trend=tuple(rng.random() for _ in range(rng.randint(0, 200))),
        )
        cells = row_cells(row, cols, PLAIN, is_all=False)
        widths.add(tuple(sum(len(text) for text, _ in cell) for cell in cells))
    assert widths == {tuple(w for _, w in cols)}


def test_all_row_sums_load_and_takes_the_worst_latency():
    a = RowData("a", state=State.READY, kv_used=50.0, kv_cap=100.0, running=3, max_seqs=256, ttft95=0.2)
    b = RowData("b", state=State.READY, kv_used=150.0, kv_cap=300.0, running=5, max_seqs=1024, ttft95=0.9)
    c = RowData("c", state=State.STOPPED, max_seqs=256)
    total = all_row([a, b, c])
    assert total.state_label == "2/3 up" and total.running == 8 and total.max_seqs == 1536
    assert total.kv == 0.5 and total.ttft95 == 0.9


def test_bars_are_solid_sub_cell_and_marked_without_colour():
    assert bar(0.5, 4) == ("\u2588\u2588", "\u2591\u2591")
    filled, empty = bar(0.53, 10)  # 5.3 cells: 5 full and a partial eighth-block
    assert filled.startswith("\u2588" * 5) and len(filled) == 6 and len(filled + empty) == 10
    assert bar(None, 3) == ("", "\u2591" * 3)
    assert (level_mark(0.5), level_mark(0.8), level_mark(0.95)) == ("", "!", "!!")


def _rows(app) -> list[str]:
    table = app.screen.query_one(FleetTable)
    return list(table.names)


async def test_sort_filter_and_mouse_selection(fake, app_factory, h):
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for name, kv in (("qwen", 0.3), ("llama", 0.9), ("embed", 0.6)):
            app.post_message(MetricsArrived(h.metrics(name, kv_usage=kv)))
        await settle(pilot)
        app.repaint()
        await settle(pilot)
        assert _rows(app) == ["qwen", "llama", "embed"]  # the layout's order
        await pilot.press("greater_than_sign")  # sort by the first column: name
        await settle(pilot)
        assert _rows(app) == ["embed", "llama", "qwen"] and "NAME^" in screen_text(app)
        await pilot.press("I")
        await settle(pilot)
        assert _rows(app) == ["qwen", "llama", "embed"] and "NAMEv" in screen_text(app)
        table = app.screen.query_one(FleetTable)
        x = 2 + sum(w + 1 for c, w in table._columns[: [c.key for c, _ in table._columns].index("kvpct")])
        await pilot.click(FleetTable, offset=(x + 1, 0))  # a click on the KV% header: fullest first
        await settle(pilot)
        assert _rows(app) == ["llama", "embed", "qwen"]
        await pilot.click(FleetTable, offset=(5, 3))  # the third row
        await settle(pilot)
        assert app.screen.selected_name() == "qwen"
        await pilot.press("slash", "l", "l")
        await settle(pilot)
        assert _rows(app) == ["llama"] and app.screen.selected_name() == "llama"
        await pilot.press("escape")  # clears the filter
        await settle(pilot)
        assert len(_rows(app)) == 3
        await pilot.press("j")  # keys reach the dashboard again, not the filter box
        await settle(pilot)
        assert app.screen.selected_name() == "embed"
        await pilot.click(FleetTable, offset=(5, 1), times=2)  # a double click opens the detail screen
        await settle(pilot)
        assert isinstance(app.screen, DetailScreen) and app.screen.instance == "llama"


async def test_unset_max_num_seqs_shows_vllms_default(fake, app_factory, h):
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.post_message(MetricsArrived(h.metrics("embed", running=2.0)))
        await settle(pilot)
        app.repaint()
        await settle(pilot)
        embed = next(line for line in screen_text(app).splitlines() if line[2:].startswith("embed"))
        assert "2/1024" in embed  # a sim instance on an 80 GiB (simulated) GPU: vLLM's 1024
        await pilot.press("j", "j")
        await settle(pilot)
        assert "max-num-seqs 1024 (vLLM default)" in screen_text(app)


async def test_theme_key_cycles_dark_light_high_contrast(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        seen = [app.theme]
        for _ in range(3):
            await pilot.press("ctrl+t")
            await settle(pilot)
            seen.append(app.theme)
        assert seen == ["textual-dark", "textual-light", "vtui-high-contrast", "textual-dark"]
        assert "READY" in screen_text(app)


async def test_detail_plots_have_titles_axes_and_two_windows(fake, app_factory, h):
    app = app_factory(fake)
    async with app.run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        for i in range(30):
            app.on_metrics_arrived(MetricsArrived(h.metrics("qwen", at=h.NOW - 30 + i, running=float(i))))
        app.repaint()
        await pilot.press("enter")
        await settle(pilot, 5)
        text = screen_text(app)
        assert "History: last 5 min (30 samples" in text
        assert "KV cache usage: 61 %" in text and "requests: running 29, waiting 3" in text
        assert "s before now" in text and "-300" in text  # x axis: seconds before now
        await pilot.press("w")
        await settle(pilot, 5)
        text = screen_text(app)
        assert "History: last 1 h (3 samples" in text and "min before now" in text  # one per 10 s
        assert len(app.store.views["qwen"].long_history) == 3
