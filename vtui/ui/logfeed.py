"""The log-line path between the supervisor and the UI: coalesced, bounded, never falling behind.

The supervisor hands over whatever its tailers read (one batch per instance per tick: a flood of 130k
lines/s arrives as batches of 26k). The UI must not queue all of them: `LogCoalescer` keeps at most
`max_lines` per instance per window (the newest; no more than the view's ring holds), counts the rest as skipped, and posts one batch per
instance per window (`window` seconds; the first batch after a quiet spell goes out at once). The view
shows a "N lines skipped" marker where lines were dropped; the log file keeps them all.

Thread-safe: `add` may be called from any thread; `flush` runs on the UI's loop (or wherever `post` is
safe to call: Textual's `post_message` is).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from vtui.ui.store import LOG_LINES

WINDOW = 0.05  # seconds: at most 20 log batches per instance per second reach the UI
MAX_LINES = LOG_LINES - 1  # per instance per batch (with its marker, what the ring holds)

# (instance, lines, skipped before them)
PostBatch = Callable[[str, tuple[str, ...], int], None]


class LogCoalescer:
    def __init__(
        self,
        post: PostBatch,
        *,
        window: float = WINDOW,
        max_lines: int = MAX_LINES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._post = post
        self.window = window
        self.max_lines = max_lines
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, deque[str]] = {}
        self._skipped: dict[str, int] = {}
        self._armed = False
        self._last_flush = -1e9
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.skipped_total = 0

    def bind(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """The loop that runs the delayed flushes (without one, every batch is posted at once); called on
        that loop's thread."""
        self._loop = loop
        self._loop_thread = threading.get_ident() if loop is not None else None

    def add(self, instance: str, lines: Iterable[str]) -> None:
        flush_now = schedule = False
        with self._lock:
            buf = self._pending.get(instance)
            if buf is None:
                buf = self._pending[instance] = deque(maxlen=self.max_lines)
            before = len(buf)
            lines = lines if isinstance(lines, tuple | list) else tuple(lines)
            buf.extend(lines)
            dropped = before + len(lines) - len(buf)
            if dropped:
                self._skipped[instance] = self._skipped.get(instance, 0) + dropped
                self.skipped_total += dropped
            if not self._armed:
                if self._loop is None or self._clock() - self._last_flush >= self.window:
                    flush_now = True
                else:
                    self._armed = schedule = True
        if flush_now:
            self.flush()
        elif schedule and self._loop is not None:
            loop = self._loop
            if threading.get_ident() == self._loop_thread:  # on the loop already: no wake-up pipe write
                loop.call_later(self.window, self._timer_flush)
                return
            try:
                loop.call_soon_threadsafe(loop.call_later, self.window, self._timer_flush)
            except RuntimeError:  # the loop is closed: the app is going away
                pass

    def _timer_flush(self) -> None:
        self.flush()

    def flush(self) -> None:
        """Post everything pending now (also called before a state change, so the lines that led to it
        reach the store first)."""
        with self._lock:
            pending, skipped = self._pending, self._skipped
            self._pending, self._skipped = {}, {}
            self._armed = False
            self._last_flush = self._clock()
        for instance, buf in pending.items():
            if buf or skipped.get(instance):
                self._post(instance, tuple(buf), skipped.get(instance, 0))
