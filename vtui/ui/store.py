"""The UI's model: what the dashboard knows about each instance, mutated only by the App's handlers.

Workers never touch it (they post frozen samples as messages); every buffer is bounded, so a week-long
session costs the same memory as a minute-long one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vtui.core.masking import MASK, SECRET_FLAGS, masked
from vtui.core.model import FlagValue, InstanceSpec, Layout
from vtui.core.pending import FlagConflict
from vtui.core.state import State
from vtui.core.status import HostState, InstanceStatus
from vtui.telemetry.gpu import GpuSample
from vtui.telemetry.metrics import HistoryBackfill, HistoryPoint, MetricsSample

if TYPE_CHECKING:  # the readers are imported on first use (not before the first frame)
    from vtui.planner import ModelConfig
    from vtui.telemetry.kvshort import KvShortWatch
    from vtui.telemetry.problems import Problem
    from vtui.telemetry.startup_log import StartupFacts

HISTORY_SAMPLES = 600  # 10 minutes at 1 Hz
LONG_EVERY_S = 10.0  # the hour-long history keeps one sample per 10 s (the detail screen's 1 h plots)
LONG_SAMPLES = 360
LOG_LINES = 5000  # per instance: the ring the log view follows (older lines: read from the file)
RUN_LINES = 3000  # the current run's lines, for startup facts and diagnosis
FLAG_HISTORY = 50


@dataclass
class FlagRecord:
    """One flag set an instance ran with and what it produced."""

    flags: dict[str, FlagValue]
    outcome: str = "starting"  # starting | ready | failed
    kv_tokens: int | None = None
    max_concurrency: float | None = None
    error: str | None = None
    note: str | None = None  # e.g. "preset A", "rollback"
    at: float | None = None  # wall clock when this flag set was (re)started
    bench: dict | None = None  # the latest bench run's summary (screens.bench.bench_summary)


@dataclass
class InstanceView:
    name: str
    status: InstanceStatus | None = None
    sample: MetricsSample | None = None
    history: deque[HistoryPoint] = field(default_factory=lambda: deque(maxlen=HISTORY_SAMPLES))
    long_history: deque[HistoryPoint] = field(default_factory=lambda: deque(maxlen=LONG_SAMPLES))
    logs: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    run_lines: deque[str] = field(default_factory=lambda: deque(maxlen=RUN_LINES))
    facts: StartupFacts | None = None
    problems: list[Problem] = field(default_factory=list)  # of the startup log (a failed run)
    runtime_problems: list[Problem] = field(default_factory=list)  # "KV cache short", from kv_watch
    kv_watch: KvShortWatch | None = None  # made at the first sample (the diagnosis is imported then)
    flag_history: deque[FlagRecord] = field(default_factory=lambda: deque(maxlen=FLAG_HISTORY))
    pending_note: str | None = None
    history_rev: int = 0  # bumped on every flag_history change (the App persists it when it moves)
    needs_diagnosis: bool = False

    @property
    def state(self) -> State:
        return self.status.state if self.status else State.STOPPED

    @property
    def spec(self) -> InstanceSpec | None:
        return self.status.spec if self.status else None

    @property
    def all_problems(self) -> list[Problem]:
        """What the detail screen lists and its fix keys index: the startup log's, then the live ones."""
        return [*self.problems, *self.runtime_problems]

    def rollback_flags(self) -> dict[str, FlagValue] | None:
        """The flags before the last change: the latest flag set in the history other than the one it
        runs now, whatever that change produced (None: no other flag set is known). A secret the history
        holds masked is the secret as it runs (secrets are never recorded)."""
        if self.spec is not None:
            running = dict(self.spec.flags)
        elif self.flag_history:
            running = dict(self.flag_history[-1].flags)
        else:
            return None
        for rec in reversed(self.flag_history):
            if masked(rec.flags) != masked(running):
                return {
                    k: running.get(k, v) if v == MASK and k in SECRET_FLAGS else v
                    for k, v in rec.flags.items()
                }
        return None

    def can_rollback(self) -> bool:
        """`b` applies: the instance runs (or ran) under vtui, is not stopping, and had other flags."""
        return self.status is not None and self.state != State.STOPPING and self.rollback_flags() is not None


class Store:
    """Per-instance views, the latest GPU sample and the layout as saved (for the unsaved marker)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.saved_layout = layout
        self.path = layout.path  # where the layout was loaded from / last saved to
        # the instances as run: a `replicas = N` entry is NAME-0 … and NAME-router (InstanceSpec.run_specs)
        run = [spec for entry in layout.instances for spec in entry.run_specs()]
        self.views: dict[str, InstanceView] = {s.name: InstanceView(s.name) for s in run}
        self.gpu: GpuSample | None = None
        self.hosts: dict[str, HostState] = {}  # `vtui --host` links by label (empty: this machine only)
        self.host_gpus: dict[str, GpuSample] = {}  # other hosts' GPU samples by label
        self.supervisor_error: str | None = None  # why the supervisor stopped working, once it has
        self._dirty_memo: tuple[Layout, Layout, bool] | None = None
        # instance -> flags edited in a flag editor (this dashboard's or another's), not yet applied
        self.pending: dict[str, dict[str, FlagValue]] = {}
        self.pending_conflicts: dict[str, tuple[FlagConflict, ...]] = {}  # their flags changed by both
        self._known_facts: Mapping[str, StartupFacts] = {}
        # planner model configs (or why none could be read) by planning.config_key
        self.configs: dict[tuple[str, str, str | None], tuple[ModelConfig | None, str | None]] = {}
        for spec in run:
            self.views[spec.name].flag_history.append(FlagRecord(dict(spec.flags), outcome="planned"))

    # -- layout ----------------------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        """The layout differs from the one saved (layouts are immutable: remembered per pair)."""
        memo = self._dirty_memo
        if memo is None or memo[0] is not self.layout or memo[1] is not self.saved_layout:
            memo = self._dirty_memo = (
                self.layout,
                self.saved_layout,
                _layout_key(self.layout) != _layout_key(self.saved_layout),
            )
        return memo[2]

    @property
    def unsaved(self) -> bool:
        """`[+] unsaved`: the layout differs from the file, or flag edits wait (applied to nothing yet)."""
        return bool(self.pending) or self.dirty

    def set_pending(
        self,
        edits: Mapping[str, Mapping[str, FlagValue]],
        conflicts: Mapping[str, Sequence[FlagConflict]] | None = None,
    ) -> bool:
        """The session's pending flag edits as its owner holds them (`core.pending`), and the conflicts
        of their rebases (None: those known, for the edits still pending); True if changed."""
        new = {name: dict(flags) for name, flags in edits.items() if flags and name in self.views}
        known = self.pending_conflicts if conflicts is None else conflicts
        marks = {name: tuple(found) for name, found in known.items() if found and name in new}
        if new == self.pending and marks == self.pending_conflicts:
            return False
        self.pending, self.pending_conflicts = new, marks
        return True

    def names(self) -> list[str]:
        return list(self.views)

    def view(self, name: str) -> InstanceView:
        return self.views[name]

    def mark_saved(self, layout: Layout, path=None) -> None:
        self.layout = layout
        self.saved_layout = layout
        self.path = path if path is not None else self.path

    # -- updates (each returns the names whose view changed) ---------------------------------------
    def apply_statuses(
        self,
        statuses: Iterable[InstanceStatus],
        layout: Layout | None = None,
        known_facts: Mapping[str, StartupFacts] | None = None,
    ) -> set[str]:
        """`known_facts`: startup facts the session supervisor read from each run's whole log, used for
        an instance seen READY for the first time (a dashboard attaching to running instances) instead
        of parsing its lines here, before the first frame."""
        if layout is not None:
            self.layout = layout
        self._known_facts = known_facts or {}
        statuses = tuple(statuses)
        listed = {st.name for st in statuses}
        for name in [n for n, v in self.views.items() if n not in listed and _scaled_away(v.status)]:
            del self.views[name]  # a replica `replicas` lowered took away: no row left for it
        changed: set[str] = set()
        for st in statuses:
            view = self.views.get(st.name)
            if view is None:
                view = self.views[st.name] = InstanceView(st.name)
            old = view.status
            if old == st:
                continue
            changed.add(st.name)
            view.status = st
            self._on_transition(view, old, st)
        return changed

    def _on_transition(self, view: InstanceView, old: InstanceStatus | None, new: InstanceStatus) -> None:
        flags = dict(new.spec.flags)
        last = view.flag_history[-1] if view.flag_history else None
        before = (id(last), last.outcome if last else None)
        if (
            last is None
            or last.flags != flags
            or (
                new.state == State.STARTING
                and last.outcome != "starting"
                and (old is None or old.state != State.STARTING)
            )
        ):
            view.flag_history.append(FlagRecord(flags, note=view.pending_note, at=new.started_at))
            view.pending_note = None
            last = view.flag_history[-1]
        self._record_outcome(view, old, new, last)
        if (id(last), last.outcome) != before:
            view.history_rev += 1

    def _record_outcome(
        self, view: InstanceView, old: InstanceStatus | None, new: InstanceStatus, last: FlagRecord
    ) -> None:
        if new.state not in (State.READY, State.UNHEALTHY):
            view.runtime_problems = []  # no longer serving: the live diagnosis no longer holds
            if view.kv_watch is not None:
                view.kv_watch.reset()
        if new.state == State.STARTING and (old is None or old.state != State.STARTING):
            view.run_lines.clear()
            view.problems = []
            view.sample = None
        if new.state == State.READY and (old is None or old.state != State.READY):
            known = self._known_facts.get(view.name) if old is None else None
            if known is None:  # (the parser's regexes are compiled on first use, not at the first frame)
                from vtui.telemetry.startup_log import parse_startup

                known = parse_startup(list(view.run_lines))
            view.facts = known
            view.problems = []
            if last.outcome in ("starting", "planned"):
                last.outcome = "ready"
                last.kv_tokens = view.facts.kv_cache_tokens
                last.max_concurrency = view.facts.max_concurrency
        if new.state in (State.CRASHED, State.FAILED) and (old is None or old.state != new.state):
            view.needs_diagnosis = True  # the App runs diagnose() off the UI loop (it may probe ports)
            if last.outcome != "ready":
                last.outcome = "failed"
                last.error = new.last_error

    def merge_history(self, name: str, loaded: list[FlagRecord]) -> None:
        """Put the records read from disk before this session's; the start-up "planned" entry folds
        into the last loaded one when their flags are the same."""
        view = self.views.get(name)
        if view is None:
            return
        current = list(view.flag_history)
        if loaded and current and current[0].outcome == "planned" and current[0].flags == loaded[-1].flags:
            current = current[1:]
        view.flag_history.clear()
        view.flag_history.extend([*loaded, *current])
        view.history_rev += 1

    def attach_bench(self, name: str, summary: dict) -> bool:
        """Attach a bench run to the flag set the instance runs now (its latest history entry)."""
        view = self.views.get(name)
        if view is None or not view.flag_history:
            return False
        view.flag_history[-1].bench = dict(summary)
        view.history_rev += 1
        return True

    def set_diagnosis(self, name: str, facts: StartupFacts, problems: list[Problem]) -> bool:
        view = self.views.get(name)
        if view is None:
            return False
        view.facts, view.problems = facts, list(problems)
        return True

    def add_sample(self, sample: MetricsSample) -> str | None:
        view = self.views.get(sample.instance or "")
        if view is None:
            return None
        view.sample = sample
        self._keep(view, HistoryPoint.of(sample))
        if view.state in (State.READY, State.UNHEALTHY):
            # "KV cache short": full, requests waiting, preemptions rising, for a while (cheap; per sample)
            view.runtime_problems = self._watch_kv(view, sample, sample.preemptions_per_s)
        return view.name

    @staticmethod
    def _watch_kv(
        view: InstanceView, point: HistoryPoint | MetricsSample, rate: float | None = None
    ) -> list[Problem]:
        from vtui.telemetry.kvshort import KvShortWatch, run_memory_rule

        if view.kv_watch is None:
            view.kv_watch = KvShortWatch()
        flags = view.spec.flags if view.spec else None
        return view.kv_watch.observe(point, flags, rate, run_memory_rule(view.facts, flags))

    def add_backfill(self, backfill: HistoryBackfill) -> str | None:
        """A newly attached dashboard's history of one instance: its points, then its newest sample."""
        view = self.views.get(backfill.instance)
        if view is None:
            return None
        for point in backfill.points:
            self._keep(view, point)
            if view.state in (State.READY, State.UNHEALTHY):
                self._watch_kv(view, point)  # the warning as a dashboard attached all along shows it
        return self.add_sample(backfill.latest)

    @staticmethod
    def _keep(view: InstanceView, point: HistoryPoint) -> None:
        view.history.append(point)
        if not view.long_history or not 0 <= point.at - view.long_history[-1].at < LONG_EVERY_S:
            view.long_history.append(point)

    def add_logs(self, name: str, lines: Iterable[str], skipped: int = 0) -> bool:
        """Append a batch; `skipped` lines were dropped before it (a flood) and leave a marker line."""
        view = self.views.get(name)
        if view is None:
            return False
        if skipped:
            view.logs.append(skipped_marker(skipped))
        view.logs.extend(lines)
        view.run_lines.extend(lines)
        return True

    def set_gpu(self, sample: GpuSample, host: str | None = None) -> None:
        if host is None:
            self.gpu = sample
        else:
            self.host_gpus[host] = sample

    def set_hosts(self, hosts: Iterable[HostState]) -> None:
        self.hosts = {h.label: h for h in hosts}

    def host_of(self, view: InstanceView) -> HostState | None:
        """The link of another host's instance (None: this machine's)."""
        host = view.status.host if view.status else None
        return self.hosts.get(host) if host else None

    def pid_owner_hint(self) -> Mapping[str, int | None]:
        return {n: (v.status.pid if v.status else None) for n, v in self.views.items()}


SKIPPED_PREFIX = "[vtui] ... "


def skipped_marker(count: int) -> str:
    """The line that stands for `count` lines a flood made the UI drop (the log file has them)."""
    return f"{SKIPPED_PREFIX}{count} lines skipped (flood; the log file has them all)"


def is_marker(line: str) -> bool:
    return line.startswith(SKIPPED_PREFIX)


def run_diagnosis(
    lines: list[str], gpu: GpuSample | None, gpus: tuple[int, ...], name: str, own_pids: set[int]
) -> tuple[StartupFacts, list[Problem]]:
    """Startup facts and problems of a failed run (blocking: may look up port holders; call in a thread)."""
    from vtui.telemetry.diagnosis import diagnose
    from vtui.telemetry.startup_log import parse_startup

    facts = parse_startup(lines)
    problems = diagnose(lines, facts, gpu=gpu, gpu_indices=gpus, instance=name, own_pids=own_pids)
    return facts, problems


def _layout_key(layout: Layout) -> tuple:
    return (
        layout.session,
        tuple(
            (
                s.name,
                s.model,
                s.engine,
                s.gpus,
                s.port,
                s.host,
                tuple(sorted(s.flags.items(), key=lambda kv: kv[0])),
            )
            for s in layout.instances
        ),
    )


def _scaled_away(last: InstanceStatus | None) -> bool:
    """The last status of an instance the supervisor lists no more: a replica, stopped (the supervisor
    forgets one when its group's `replicas` is lowered)."""
    return (
        last is not None and bool(last.spec.group) and last.spec.engine != "router" and not last.state.running
    )
