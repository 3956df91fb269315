"""The supervisor's notion of time, injected so state-machine tests replay histories without sleeping.

One time base (wall-clock seconds, like `time.time()`) for every timestamp that reaches a consumer:
`StateChanged.at`, `InstanceStatus.started_at`, `next_restart_at` — the UI can subtract `time.time()`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock: `time.time()` and `asyncio.sleep`."""

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
