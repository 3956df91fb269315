"""The log view: follows past its ring (it froze at the 5000th line), probes hidden by default, a flood
coalesced to a "skipped" marker, older lines read back from the log file, memory back after leaving."""

from __future__ import annotations

import re

from textual import events

from vtui.core.state import State
from vtui.supervisor.logfile import read_older
from vtui.ui.logfeed import LogCoalescer
from vtui.ui.screens.logs import LogScreen, LogView, is_probe
from vtui.ui.store import LOG_LINES
from vtui.ui.textdump import screen_text

PROBE_LINE = 'INFO:     127.0.0.1:40112 - "GET /metrics HTTP/1.1" 200 OK'
HEALTH_LINE = 'INFO:     127.0.0.1:40113 - "GET /health HTTP/1.1" 200 OK'


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause(0.06)  # past the coalescing window


def last_number(app) -> int | None:
    found = re.findall(r"line (\d+)", screen_text(app))
    return int(found[-1]) if found else None


async def test_follows_past_the_ring_and_after_reopening(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("l")
        await settle(pilot)
        n = 0
        for _ in range(3 * LOG_LINES // 500):
            fake.emit_logs("qwen", [f"line {n + i}" for i in range(500)])
            n += 500
            await settle(pilot, 1)
            assert last_number(app) == n - 1  # on screen, every batch, past the 5000th line
        await pilot.press("escape")
        await pilot.press("l")
        await settle(pilot)
        fake.emit_logs("qwen", ["line 99999"])
        await settle(pilot)
        assert last_number(app) == 99999
        assert len(app.screen.query_one(LogView).lines) <= LOG_LINES  # bounded


async def test_pause_counts_new_lines_and_f_follows_again(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        fake.emit_logs("qwen", [f"line {i}" for i in range(6000)])
        await pilot.press("l")
        await settle(pilot)
        await pilot.press("pageup")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, LogScreen) and not screen.follow
        shown = last_number(app)
        fake.emit_logs("qwen", [f"line {i}" for i in range(6000, 6100)])
        await settle(pilot)
        assert last_number(app) == shown and "100 new lines" in screen_text(app)
        await pilot.press("F")
        await settle(pilot)
        assert screen.follow and last_number(app) == 6099
        await pilot.press("pageup", "end")
        await settle(pilot)
        assert screen.follow and last_number(app) == 6099


async def test_the_mouse_wheel_up_pauses_and_scrolls(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        fake.emit_logs("qwen", [f"line {i}" for i in range(600)])
        await pilot.press("l")
        await settle(pilot)
        screen = app.screen
        view = screen.query_one(LogView)
        assert isinstance(screen, LogScreen) and screen.follow and last_number(app) == 599
        view.post_message(events.MouseScrollUp(view, 1, 1, 0, -1, 0, False, False, False))
        await settle(pilot)
        assert not screen.follow and last_number(app) < 599  # paused, and Textual's own handler scrolled


async def test_probes_hidden_by_default_one_key_shows_them(fake, app_factory):
    assert is_probe(PROBE_LINE) and is_probe(HEALTH_LINE) and not is_probe("ERROR /metrics exporter died")
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        fake.emit_logs("qwen", ["line 1", PROBE_LINE, HEALTH_LINE, "line 2"])
        await pilot.press("l")
        await settle(pilot)
        text = screen_text(app)
        assert "line 2" in text and "GET /metrics" not in text and "2 probe lines hidden" in text
        await pilot.press("P")
        await settle(pilot)
        assert "GET /metrics" in screen_text(app) and "GET /health" in screen_text(app)


def test_coalescer_bounds_a_flood_and_counts_what_it_skips():
    posted: list[tuple[str, int, int]] = []
    feed = LogCoalescer(
        lambda name, lines, skipped: posted.append((name, len(lines), skipped)), max_lines=100
    )
    feed.add("a", [f"x{i}" for i in range(30_000)])  # no loop bound: posted at once
    assert posted == [("a", 100, 29_900)]
    feed.add("a", ["y"])
    assert posted[-1] == ("a", 1, 0)


async def test_flood_shows_a_skipped_marker_and_esc_answers(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("l")
        await settle(pilot)
        for k in range(5):
            fake.emit_logs("qwen", [f"line {k * 30_000 + i}" for i in range(30_000)])
        await settle(pilot)
        assert "lines skipped" in "\n".join(app.screen.query_one(LogView).lines)
        assert last_number(app) == 5 * 30_000 - 1  # the newest line is always shown
        await pilot.press("escape")
        await settle(pilot, 1)
        assert not isinstance(app.screen, LogScreen)


async def test_scrolling_back_reads_older_lines_from_the_file(fake, app_factory, tmp_path):
    log = tmp_path / "qwen.log"
    old = tmp_path / "qwen.log.1"
    old.write_text("".join(f"line {i}\n" for i in range(0, 3000)))
    log.write_text("".join(f"line {i}\n" for i in range(3000, 12_000)))
    assert read_older(log, ["line 7000", "line 7001"], 3) == ["line 6997", "line 6998", "line 6999"]
    assert read_older(log, ["line 3000", "line 3001"], 2) == ["line 2998", "line 2999"]  # rotated file
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        fake.set_state("qwen", State.STOPPED)
        fake.set_state("qwen", State.READY, log_path=log)  # the status says where the file is
        for start in range(5000, 12_000, 1000):
            fake.emit_logs("qwen", [f"line {i}" for i in range(start, start + 1000)])
            await settle(pilot, 1)
        await pilot.press("l")
        await settle(pilot)
        view = app.screen.query_one(LogView)
        await pilot.press("home")
        for _ in range(20):
            await settle(pilot, 1)
            if view.lines[0] != f"line {12_000 - LOG_LINES}":
                break
        assert view.lines[0] == f"line {12_000 - LOG_LINES - 2000}"
        assert list(view.lines).index(f"line {12_000 - LOG_LINES}") == 2000  # in order, no gap
        assert "line 7000" in screen_text(app) or view.scroll_y >= 1999  # the rows shown stayed put
        await pilot.press("F")
        await settle(pilot)
        assert len(view.lines) == LOG_LINES and last_number(app) == 11_999  # back to the ring


async def test_coalescer_merges_batches_within_a_window():
    import asyncio

    posted: list[tuple[str, tuple[str, ...], int]] = []
    feed = LogCoalescer(lambda name, lines, skipped: posted.append((name, lines, skipped)), window=0.05)
    feed.bind(asyncio.get_running_loop())
    feed.add("a", ["1"])  # after a quiet spell: at once
    feed.add("a", ["2"])
    feed.add("a", ["3"])
    assert posted == [("a", ("1",), 0)]
    await asyncio.sleep(0.12)
    assert posted == [("a", ("1",), 0), ("a", ("2", "3"), 0)]  # the rest in one batch, in order


async def test_rows_drawn_the_same_on_the_fast_path_and_the_general_one(fake, app_factory):
    """Printable ASCII rows take a one-Strip path; tabs, control and wide characters the general one:
    both crop at the horizontal scroll, pad to the width, and colour errors."""
    app = app_factory(fake)
    async with app.run_test(size=(40, 12)) as pilot:
        await settle(pilot)
        await pilot.press("l")
        await settle(pilot)
        view = app.screen.query_one(LogView)
        lines = [
            "plain ascii line " * 4,
            "tab\there " * 5,
            "wide 漢字 line " * 4,
            "ERROR it broke",
            "ctl\x07x",
        ]
        view.set_lines(lines)
        await settle(pilot)
        width = view.size.width
        for x in (0, 7):
            view.scroll_to(x=x, y=0, animate=False, immediate=True)
            for y, line in enumerate(lines):
                strip = view.render_line(y)
                assert strip.cell_length == width
                shown = line.expandtabs().replace("\x07", "\ufffd")
                if line.isascii() and line.isprintable():
                    assert strip.text == shown[x : x + width].ljust(width)
                else:
                    assert strip.text.rstrip() in shown  # (a wide character cut in half is padded)
        view.scroll_to(x=0, y=0, animate=False, immediate=True)
        error = view.render_line(3)
        assert any(seg.style and seg.style.bold and seg.text.startswith("ERROR") for seg in error)


async def test_refiltering_resizes_the_scroll_range_without_a_layout_pass(fake, app_factory):
    """P changes how many lines the view holds: its scroll range and scrollbar follow, still at the end."""
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("l")
        await settle(pilot)
        fake.emit_logs("qwen", [PROBE_LINE if i % 2 else f"line {i}" for i in range(400)])
        await settle(pilot)
        view = app.screen.query_one(LogView)
        for shown in (True, False, True):
            await pilot.press("P")
            await settle(pilot)
            ring = list(app.store.views["qwen"].logs)
            lines = len(view.lines)
            assert lines == (len(ring) if shown else len([x for x in ring if not is_probe(x)]))
            assert lines >= (400 if shown else 200)
            assert view.virtual_size.height == lines
            assert view.vertical_scrollbar.window_virtual_size == lines
            assert view.scroll_y == view.max_scroll_y == lines - view.scrollable_content_region.height
            assert ("GET /metrics" in screen_text(app)) == shown and last_number(app) == 398


EIGHTHS = set("▁▂▃▄▅▆▇▏▎▍▌▋▊▉")


async def test_scroll_bars_leave_no_block_glyphs_at_the_right_edge(fake, app_factory, h):
    """The log view's and the detail screen's scroll thumbs are whole cells: Textual's eighth-block ends
    read as stray characters at the screen's edge (and in any text capture of it)."""
    from vtui.ui.messages import MetricsArrived

    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        fake.emit_logs("qwen", [f"line {i} " + "x" * (60 + i % 90) for i in range(997)])
        for i in range(300):
            app.on_metrics_arrived(MetricsArrived(h.metrics("qwen", at=h.NOW - 300 + i)))
        await settle(pilot)
        for key, scroll in (("l", "pageup"), ("enter", "pagedown")):
            await pilot.press(key)
            await settle(pilot)
            await pilot.press(scroll)  # a thumb between two cells
            await settle(pilot)
            rows = screen_text(app).splitlines()
            edge = {ch for row in rows for ch in row.rstrip("\n")[-3:]} | {ch for ch in rows[-3]}
            assert not edge & EIGHTHS, (key, sorted(edge & EIGHTHS))
            await pilot.press("escape")
            await settle(pilot)
