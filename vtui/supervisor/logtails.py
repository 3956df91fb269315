"""The log files the supervisor follows, one per instance: new lines go to the instance (its phase, its
last lines) and out as `LogLines` events."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from vtui.core.events import Event, LogLines
from vtui.core.instance import Instance
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.logfile import LogTailer

__all__ = ["LogTails"]


class LogTails:
    def __init__(
        self, instances: Mapping[str, Instance[ProcessHandle]], emit: Callable[[Event], None]
    ) -> None:
        self._instances = instances
        self._emit = emit
        self._tailers: dict[str, LogTailer] = {}

    def follow(self, name: str, path: Path) -> None:
        """Follow `path` for `name` from now on (the file of a new launch, or an adopted one's)."""
        old = self._tailers.pop(name, None)
        if old is not None:
            old.close()
        self._tailers[name] = LogTailer(path)

    def drain(self, name: str) -> None:
        """Hand `name` the lines written since the last drain."""
        tailer = self._tailers.get(name)
        if tailer is None:
            return
        lines = tailer.read()
        if lines:
            self._instances[name].on_lines(lines)
            self._emit(LogLines(name, tuple(lines)))

    def close(self) -> None:
        for tailer in self._tailers.values():
            tailer.close()
        self._tailers.clear()
