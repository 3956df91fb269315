"""The end of the dashboard's start (`Startup`): once the first frame is drawn, when that was, the cyclic
collector back on (off since the CLI's start: vtui.cli), the flag history's first writes, and on a real
terminal the start's heap frozen (`freeze_heap`)."""

from __future__ import annotations

import gc
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vtui.ui.app import VtuiApp

HEAP_FREEZE_AFTER_S = (2.0, 15.0)  # after the first frame; the second, after the history backfill
# Allocations between young collections once the heap is frozen (Python's default: 700): at 8
# instances the default ran 0.6 young collections a second (0.3-0.4 ms each); at 10k, one in some 20 s
# (3-4 ms), the collector's CPU 0.48 -> 0.31 ms/s (`benchmarks/bench_ui_breakdown.py`).
GC_YOUNG_THRESHOLD = 10_000


class Startup:
    def __init__(self, app: VtuiApp) -> None:
        self._app = app
        self.first_frame_at: float | None = None  # time.perf_counter() at the first frame

    def first_frame(self) -> None:
        """The App's first frame is drawn (its `call_after_refresh` from `on_mount`)."""
        self.first_frame_at = time.perf_counter()
        gc.enable()  # off since the CLI's start (vtui.cli): the start's objects are built
        self._app.history.first_frame_drawn()
        if not self._app.is_headless:  # a real terminal (tests run many apps in one process: never there)
            for delay in HEAP_FREEZE_AFTER_S:
                self._app.set_timer(delay, freeze_heap)


def freeze_heap() -> None:
    """Move what the start built (Textual's widgets and styles, modules, the backfilled history: some
    100k objects) out of the cyclic collector's sight: its full collections then walk only what came
    since, not everything (each walk of everything paused the UI thread for 20-40 ms: a fifth of its CPU
    at 32 instances in `benchmarks/bench_ui_breakdown.py`). The young generations are collected first
    (a few ms; a full collection would pause for as long as the walks this avoids); frozen objects are
    still freed when nothing refers to them, only a cycle among them would stay."""
    gc.collect(1)
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
