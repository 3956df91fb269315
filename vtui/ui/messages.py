"""Textual messages that carry the workers' frozen snapshots to the App's handlers.

`can_replace` lets a busy UI coalesce: a newer status snapshot, metrics sample of the same instance or
GPU sample supersedes an older one still waiting in the queue (log lines never do: each batch counts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

from vtui.core.events import Notice
from vtui.core.status import HostState, InstanceStatus
from vtui.telemetry.gpu import GpuSample
from vtui.telemetry.metrics import HistoryBackfill, MetricsSample

if TYPE_CHECKING:  # types only: the planner and the log readers load on first use, not at start
    from vtui.planner import ModelConfig
    from vtui.telemetry.diagnosis import Problem
    from vtui.telemetry.startup_log import StartupFacts


class StatusesChanged(Message):
    def __init__(self, statuses: tuple[InstanceStatus, ...]) -> None:
        super().__init__()
        self.statuses = statuses

    def can_replace(self, message: Message) -> bool:
        """This snapshot, not yet handled, gives way to the newer `message` (Textual asks the older one)
        unless the newer drops a name: this one carries the last state of an instance no longer listed
        (a replica scaled away: STOPPED, then forgotten, often in one read of the feed), which the store
        needs to let its row go."""
        if not isinstance(message, StatusesChanged):
            return False
        names = {st.name for st in message.statuses}
        return all(st.name in names for st in self.statuses)


class MetricsArrived(Message):
    def __init__(self, sample: MetricsSample) -> None:
        super().__init__()
        self.sample = sample

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, MetricsArrived) and message.sample.instance == self.sample.instance


class MetricsBackfill(Message):
    """One instance's recent history at once (the session supervisor's, for a newly attached
    dashboard): one message, never coalesced away as queued MetricsArrived would be."""

    def __init__(self, backfill: HistoryBackfill) -> None:
        super().__init__()
        self.backfill = backfill


class GpuArrived(Message):
    """A GPU sample of this machine, or of another host (`host`: its label, `vtui --host`)."""

    def __init__(self, sample: GpuSample, host: str | None = None) -> None:
        super().__init__()
        self.sample = sample
        self.host = host

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, GpuArrived) and message.host == self.host


class HostsChanged(Message):
    """The `vtui --host` links' states (connected, disconnected and why)."""

    def __init__(self, hosts: tuple[HostState, ...]) -> None:
        super().__init__()
        self.hosts = hosts

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, HostsChanged)


class TelemetryBatch(Message):
    """What the session supervisor's feed brought in one short window: metrics samples (in order, none
    dropped: a backfill's history too) and coalesced log batches (instance, lines, skipped). One
    message instead of one per sample and per log batch: with many instances, Textual's per-message
    dispatch was the dashboard's largest cost after drawing (`benchmarks/bench_hosts.py`)."""

    def __init__(
        self,
        samples: tuple[MetricsSample, ...],
        logs: tuple[tuple[str, tuple[str, ...], int], ...],
    ) -> None:
        super().__init__()
        self.samples = samples
        self.logs = logs


class LogsArrived(Message):
    """A coalesced batch of one instance's lines; `skipped`: lines dropped before them (a flood)."""

    def __init__(self, instance: str, lines: tuple[str, ...], skipped: int = 0) -> None:
        super().__init__()
        self.instance = instance
        self.lines = lines
        self.skipped = skipped


class NoticeArrived(Message):
    def __init__(self, notice: Notice) -> None:
        super().__init__()
        self.notice = notice


class SupervisorFailed(Message):
    """The supervisor's worker ended with an exception: nothing is being supervised any more."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class LayoutSaved(Message):
    def __init__(self, layout, path) -> None:
        super().__init__()
        self.layout = layout
        self.path = path


class LayoutOpened(Message):
    def __init__(self, layout) -> None:
        super().__init__()
        self.layout = layout


class DiagnosisReady(Message):
    def __init__(self, instance: str, facts: StartupFacts, problems: list[Problem]) -> None:
        super().__init__()
        self.instance = instance
        self.facts = facts
        self.problems = problems


class ConfigLoaded(Message):
    """A model config read from disk (or why none could be), for the planner."""

    def __init__(
        self, key: tuple[str, str, str | None], config: ModelConfig | None, reason: str | None
    ) -> None:
        super().__init__()
        self.key = key
        self.config = config
        self.reason = reason


class BenchRecorded(Message):
    """A finished bench run's summary, for the instance's flag history."""

    def __init__(self, instance: str, summary: dict) -> None:
        super().__init__()
        self.instance = instance
        self.summary = summary


class HistoryLoaded(Message):
    def __init__(self, session: str, records: dict) -> None:
        super().__init__()
        self.session = session
        self.records = records
