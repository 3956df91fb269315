"""The Textual App and its one factory, `make_app`, used by the CLI (`run_tui`) and by the tests alike.

The App composes screens, starts the bridge and owns the store: its message handlers are the only code
that mutates UI state. Supervisor calls and file I/O run in workers (vtui.ui.control).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events, work
from textual.actions import ActionParseResult
from textual.app import App, ScreenStackError, SystemCommand
from textual.css.query import NoMatches
from textual.dom import DOMNode, NoScreen
from textual.message_pump import MessagePump
from textual.notifications import Notification
from textual.screen import Screen
from textual.theme import Theme
from textual.timer import Timer

from vtui.core.api import SupervisorApi, TelemetryFeed
from vtui.core.model import InstanceSpec, Layout
from vtui.layouts import LayoutError, NoLayoutError, default_layout, last_layout, remember_last
from vtui.layouts.lookup import BUILTIN_DIR
from vtui.ui import history
from vtui.ui.bridge import Bridge, GpuSamplerFactory
from vtui.ui.commands import VtuiCommands
from vtui.ui.control import ControlMixin
from vtui.ui.keymap import APP_BINDINGS, load_user_keymap
from vtui.ui.messages import (
    BenchRecorded,
    ConfigLoaded,
    DiagnosisReady,
    GpuArrived,
    HistoryLoaded,
    HostsChanged,
    LayoutOpened,
    LayoutSaved,
    LogsArrived,
    MetricsArrived,
    MetricsBackfill,
    NoticeArrived,
    StatusesChanged,
    SupervisorFailed,
    TelemetryBatch,
)
from vtui.ui.screens.base import InstanceScreen, StoreScreen
from vtui.ui.screens.dashboard import DashboardScreen
from vtui.ui.settings import UiSettings, load_settings
from vtui.ui.store import Store, run_diagnosis
from vtui.ui.widgets.notices import NoticeLine

if TYPE_CHECKING:  # the first frame imports only what it shows (screens, bench, planner: on use)
    from vtui.bench import BenchConfig, BenchResult
    from vtui.bench.engine import ProgressCallback
    from vtui.planner import ModelConfig

DEMO_LAYOUT = BUILTIN_DIR / "demo.toml"
SupervisorFactory = Callable[[Layout], SupervisorApi]
ConfigKey = tuple[str, str, str | None]
BenchRunner = Callable[["BenchConfig", "ProgressCallback | None"], Awaitable["BenchResult"]]


async def run_bench(config: BenchConfig, on_progress: ProgressCallback | None = None) -> BenchResult:
    """vtui.bench.run_bench, imported when a bench first runs (not at start)."""
    from vtui.bench import run_bench as run

    return await run(config, on_progress)


RENDER_INTERVAL = 1.0  # seconds between render passes of samples (state changes render at once)
HEAP_FREEZE_AFTER_S = (2.0, 15.0)  # after the first frame; the second, after the history backfill
# Allocations between young collections once the heap is frozen (Python's default: 700): at 8
# instances the default ran 0.6 young collections a second (0.3-0.4 ms each); at 10k, one in some 20 s
# (3-4 ms), the collector's CPU 0.48 -> 0.31 ms/s (`benchmarks/bench_ui_breakdown.py`).
GC_YOUNG_THRESHOLD = 10_000
HIGH_CONTRAST = Theme(
    name="vtui-high-contrast",
    primary="#00FFFF",
    secondary="#FFFF00",
    accent="#FF00FF",
    warning="#FFFF00",
    error="#FF4040",
    success="#00FF00",
    foreground="#FFFFFF",
    background="#000000",
    surface="#000000",
    panel="#303030",
    boost="#FFFFFF30",
    dark=True,
)
THEMES = ("textual-dark", "textual-light", HIGH_CONTRAST.name)  # what ctrl+t cycles through
KEY_HOLD_MAX = 0.25  # seconds a key waits at most for the one before it to play out (a refresh)
KEY_HOLD_TRIES = 8  # refreshes a key waits at most for a screen being pushed to be mounted


class VtuiApp(ControlMixin):
    CSS_PATH = "vtui.tcss"
    TITLE = "vtui"
    BINDINGS = [*APP_BINDINGS]
    COMMANDS = App.COMMANDS | {VtuiCommands}
    ENABLE_COMMAND_PALETTE = True

    def __init__(
        self,
        supervisor: SupervisorApi,
        *,
        supervisor_factory: SupervisorFactory,
        autostart: bool = True,
        gpu_sampler: GpuSamplerFactory | bool | None = None,
        clock: Callable[[], float] = time.time,
        keymap: dict[str, str] | None = None,
        bench_runner: BenchRunner = run_bench,
    ) -> None:
        super().__init__()
        self.bench_runner = bench_runner  # the bench screen's load generator
        self.supervisor = supervisor
        self.supervisor_factory = supervisor_factory
        self.clock = clock
        self.store = Store(supervisor.layout)
        self._autostart, self._gpu_sampler = autostart, gpu_sampler
        self.bridge = self._make_bridge()
        self.user_keymap = keymap or {}
        self.keymap_problems: list[str] = []
        self.first_frame_at: float | None = None
        self._config_pending: set[ConfigKey] = set()
        self._history_lock = asyncio.Lock()
        self._history_saved: dict[str, int] = {}  # instance -> history_rev last written
        self._history_ready = False  # nothing is written before the files were read
        self._notice_timer: Timer | None = None
        # keys of one burst, held while an earlier one's effects (a screen pushed or popped) play out
        self._held_keys: deque[events.Key] = deque()
        self._key_turn = 0  # bumped per key let through; a stale "next key" call does nothing
        self._key_busy = False

    # -- lifecycle -----------------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.register_theme(HIGH_CONTRAST)
        self.theme_changed_signal.subscribe(self, lambda _theme: self._refresh_screens(None))
        if self.user_keymap:
            self.set_keymap(self.user_keymap)
        for problem in self.keymap_problems:
            self.notify(problem, severity="warning", timeout=10)
        self.push_screen(DashboardScreen())
        self.bridge.start()
        self._load_history(self.store.layout.session.name, self.store.names())
        # One render pass per second for samples and uptimes: N instances cost one repaint, not N.
        self.set_interval(RENDER_INTERVAL, self.repaint)
        self.call_after_refresh(self._first_frame)

    def _make_bridge(self) -> Bridge:
        return Bridge(
            self,
            self.supervisor,
            autostart=self._autostart,
            gpu_sampler=self._gpu_sampler,
        )

    def on_unmount(self) -> None:
        self.bridge.stop_sources()

    def _first_frame(self) -> None:
        self.first_frame_at = time.perf_counter()
        gc.enable()  # off since the CLI's start (vtui.cli): the start's objects are built
        self._persist_history()
        if not self.is_headless:  # a real terminal (tests run many apps in one process: never there)
            for delay in HEAP_FREEZE_AFTER_S:
                self.set_timer(delay, _freeze_heap)

    # -- notifications: on the screens' reserved notice line, never over data ------------------------
    def route_notifications(self, live: list[Notification]) -> bool:
        """Called after each `notify`, expiry and screen resume (vtui.ui.textual_private): the live
        notifications go to the notice line of every screen that has one (a modal's shows through on the
        screen below); only a screen stack with none falls back to Textual's toasts."""
        lines = [line for screen in self.screen_stack for line in screen.query(NoticeLine)]
        if not lines:
            return False
        for line in lines:
            line.show(live)
        if self._notice_timer is not None:
            self._notice_timer.stop()
            self._notice_timer = None
        if live:  # redraw when the next one expires
            next_expiry = max(0.05, min(n.time_left for n in live))
            self._notice_timer = self.set_timer(next_expiry, self.refresh_notifications)
        return True

    def repaint(self) -> None:
        """One render pass of every screen from the store (the render timer's callback; state changes
        repaint at once, samples wait for it)."""
        self._refresh_screens(None)

    # -- handlers: the only place that mutates the store ---------------------------------------------
    def on_statuses_changed(self, message: StatusesChanged) -> None:
        feed = self.supervisor if isinstance(self.supervisor, TelemetryFeed) else None
        changed = self.store.apply_statuses(
            message.statuses, self.supervisor.layout, feed.facts if feed is not None else None
        )
        sup = self.supervisor  # another dashboard's flag edits, rebased when their instance restarted
        if self.store.set_pending(sup.pending_edits(), sup.pending_conflicts()):
            self._refresh_screens(None)
        for name in changed:
            view = self.store.views[name]
            if view.needs_diagnosis:
                view.needs_diagnosis = False
                self._diagnose(name, list(view.run_lines), view.spec.gpus if view.spec else ())
        if changed:
            self._refresh_screens(changed)
            self._persist_history()

    # -- flag history on disk (read once at start, written after each change; workers only) ----------
    @work(exit_on_error=False, group="history")
    async def _load_history(self, session: str, names: list[str]) -> None:
        records = await asyncio.to_thread(history.load_all, session, names)
        self.post_message(HistoryLoaded(session, records))

    def on_history_loaded(self, message: HistoryLoaded) -> None:
        if message.session != self.store.layout.session.name:
            return  # another layout opened meanwhile
        for name, records in message.records.items():
            self.store.merge_history(name, records)
        self._history_ready = True
        self._refresh_screens(None)
        self._persist_history()

    def _persist_history(self) -> None:
        if not self._history_ready or self.first_frame_at is None:
            return  # (the start's rewrite of every file waits for the first frame: _first_frame)
        session = self.store.layout.session.name
        for name, view in self.store.views.items():
            if view.status is not None and view.status.host is not None:
                continue  # another host's instance: its flag history is that host's
            if self._history_saved.get(name) != view.history_rev:
                self._history_saved[name] = view.history_rev
                self._write_history(
                    history.history_path(session, name), history.dumps(list(view.flag_history))
                )

    @work(exit_on_error=False, group="history")
    async def _write_history(self, path: Path, text: str) -> None:
        async with self._history_lock:  # in order: a later snapshot is never overwritten by an earlier one
            try:
                await asyncio.to_thread(history.save, path, text)
            except OSError as exc:
                self.notify(f"could not save the flag history {path}: {exc}", severity="warning")

    @work(exit_on_error=False, group="diagnosis")
    async def _diagnose(self, name: str, lines: list[str], gpus: tuple[int, ...]) -> None:
        try:
            own = self.supervisor.pids_of(name)
        except KeyError:  # gone from the layout since it was selected
            own = set()
        facts, problems = await asyncio.to_thread(run_diagnosis, lines, self.store.gpu, gpus, name, own)
        self.post_message(DiagnosisReady(name, facts, problems))

    def on_diagnosis_ready(self, message: DiagnosisReady) -> None:
        if self.store.set_diagnosis(message.instance, message.facts, message.problems):
            self._refresh_screens([message.instance])

    def on_metrics_arrived(self, message: MetricsArrived) -> None:
        self.store.add_sample(message.sample)  # the next render pass shows it

    def on_metrics_backfill(self, message: MetricsBackfill) -> None:
        self.store.add_backfill(message.backfill)

    def on_hosts_changed(self, message: HostsChanged) -> None:
        self.store.set_hosts(message.hosts)
        self._refresh_screens(None)

    def on_gpu_arrived(self, message: GpuArrived) -> None:
        first = (self.store.gpu if message.host is None else self.store.host_gpus.get(message.host)) is None
        self.store.set_gpu(message.sample, message.host)
        if not first:
            return  # the next render pass shows it
        for screen in self.screen_stack:
            if isinstance(screen, DashboardScreen):
                screen.refresh_gpu(self.store)

    def on_logs_arrived(self, message: LogsArrived) -> None:
        self._add_logs(message.instance, message.lines, message.skipped)

    def _add_logs(self, instance: str, lines: tuple[str, ...], skipped: int) -> None:
        if self.store.add_logs(instance, lines, skipped):
            for screen in self.screen_stack:
                if isinstance(screen, StoreScreen):
                    screen.append_logs(instance, lines, skipped)

    def on_telemetry_batch(self, message: TelemetryBatch) -> None:
        for instance, lines, skipped in message.logs:
            self._add_logs(instance, lines, skipped)
        for sample in message.samples:
            self.store.add_sample(sample)  # the next render pass shows them

    def on_supervisor_failed(self, message: SupervisorFailed) -> None:
        self.store.supervisor_error = message.error
        self.notify(f"the supervisor stopped: {message.error}", severity="error", timeout=30)
        self._refresh_screens(None)

    def on_notice_arrived(self, message: NoticeArrived) -> None:
        n = message.notice
        prefix = f"{n.instance}: " if n.instance else ""
        if n.level in ("error", "warning"):
            self.notify(prefix + n.text, severity="error" if n.level == "error" else "warning", timeout=8)
        else:
            self.notify(prefix + n.text, timeout=4)

    def on_layout_saved(self, message: LayoutSaved) -> None:
        self.store.mark_saved(replace(self.supervisor.layout, origin=message.layout.origin), message.path)
        remember_last(message.path)
        self.notify(f"saved {message.path}")
        self._refresh_screens(None)

    async def on_layout_opened(self, message: LayoutOpened) -> None:
        await self.bridge.close(stop_instances=False)
        self.supervisor = self.supervisor_factory(message.layout)
        self.store = Store(self.supervisor.layout)
        self._history_ready, self._history_saved = False, {}
        self._load_history(self.store.layout.session.name, self.store.names())
        self.bridge = self._make_bridge()
        while len(self.screen_stack) > 2:
            self.pop_screen()
        self.query_one_screen().rebuild()
        self.bridge.start()
        if message.layout.path:
            remember_last(message.layout.path)
        self.notify(f"opened {message.layout.path}")

    def query_one_screen(self) -> DashboardScreen:
        return next(s for s in self.screen_stack if isinstance(s, DashboardScreen))

    def _refresh_screens(self, names: Iterable[str] | None) -> None:
        wanted = set(names) if names is not None else None
        for screen in self.screen_stack:
            if isinstance(screen, StoreScreen) and screen.is_mounted:
                try:
                    screen.refresh_view(self.store, wanted)
                except (NoMatches, NoScreen):  # a screen being torn down while samples still arrive
                    continue

    # -- model configs for the planner (read from disk once per model, in a worker) ------------------
    def model_config(self, spec: InstanceSpec) -> tuple[ModelConfig | None, str | None] | None:
        """(config or None, reason) when known; None while it is being read (a ConfigLoaded follows)."""
        from vtui.ui import planning

        key = planning.config_key(spec)
        if key in self.store.configs:
            return self.store.configs[key]
        if key not in self._config_pending:
            self._config_pending.add(key)
            self._load_config(key)
        return None

    @work(exit_on_error=False, group="config")
    async def _load_config(self, key: ConfigKey) -> None:
        from vtui.ui import planning

        try:
            config, reason = await asyncio.to_thread(planning.load_config, key)
        except Exception as exc:  # noqa: BLE001 — a config the planner cannot read (any error): shown as the reason
            config, reason = None, f"{key[1]}: {exc}"
        self.post_message(ConfigLoaded(key, config, reason))

    def on_config_loaded(self, message: ConfigLoaded) -> None:
        self._config_pending.discard(message.key)
        self.store.configs[message.key] = (message.config, message.reason)
        self._refresh_screens(None)

    def on_bench_recorded(self, message: BenchRecorded) -> None:
        if self.store.attach_bench(message.instance, message.summary):
            self._refresh_screens([message.instance])
            self._persist_history()

    # -- app actions -------------------------------------------------------------------------------
    def action_help(self) -> None:
        from vtui.ui.screens.help import HelpScreen, live_rows, registry_rows

        if isinstance(self.screen, HelpScreen):
            return
        rows = live_rows(self.screen)
        self.push_screen(HelpScreen(rows, registry_rows(self, self.user_keymap, {r[2] for r in rows})))

    def action_cycle_theme(self) -> None:
        """Dark, light, high contrast (every theme is in the command palette's "Theme" too)."""
        i = THEMES.index(self.theme) if self.theme in THEMES else -1
        self.theme = THEMES[(i + 1) % len(THEMES)]
        self.notify(f"theme: {self.theme}", timeout=2)

    async def on_event(self, event: events.Event) -> None:
        """Keys act one after another: a key waits until the one before it has been handled and the
        screen refreshed, so a key typed right after one that opens or closes a screen reaches the
        screen now shown (its focused input), not the one going or a screen not yet mounted."""
        if isinstance(event, events.Key) and not event.is_forwarded:
            if self._key_busy or self._held_keys:
                self._held_keys.append(event)
                return
            await self._let_key_through(event)
            return
        await super().on_event(event)

    async def _let_key_through(self, event: events.Key) -> None:
        self._key_busy = True
        target = self.focused or self.screen  # where the key went: its queue holds it now
        await super().on_event(event)
        self._wait_for_key_effects(target=target)

    def _wait_for_key_effects(self, tries: int = 0, target: MessagePump | None = None) -> None:
        """Let the next held key through once `target` (the widget the key went to) has handled it and
        the screen has refreshed after that (or KEY_HOLD_MAX, a refresh that never comes)."""
        self._key_turn += 1
        turn = self._key_turn
        if target is not None:  # first the target's queue (the key), then a refresh (what it posted)
            target.call_later(self.call_after_refresh, self._next_key, turn, tries)
        else:
            self.call_after_refresh(self._next_key, turn, tries)
        self.set_timer(KEY_HOLD_MAX, partial(self._next_key, turn, tries))

    def key_again(self, key: str, character: str | None) -> None:
        """A key that reached a widget no longer focused or shown (an earlier key of the burst moved
        on): it goes again, to what has the focus once that move is done, before the keys after it."""
        self._held_keys.appendleft(events.Key(key, character))
        if not self._key_busy:
            self._key_busy = True
            self._wait_for_key_effects()

    async def _next_key(self, turn: int, tries: int) -> None:
        if turn != self._key_turn or not self._key_busy:
            return  # already moved on (the refresh or the timer came first)
        try:
            mounted = self.screen.is_mounted
        except ScreenStackError:
            mounted = True
        if not mounted and tries < KEY_HOLD_TRIES:  # a screen being pushed: its focus is not set yet
            self._wait_for_key_effects(tries + 1)
            return
        self._key_busy = False
        if self._held_keys:
            await self._let_key_through(self._held_keys.popleft())

    async def run_action(
        self,
        action: str | ActionParseResult,
        default_namespace: DOMNode | None = None,
        namespaces: Mapping[str, DOMNode] | None = None,
    ) -> bool:
        """Textual's, and an instance key whose action does not apply (greyed: `check_action`) says why
        it did nothing instead of nothing."""
        done = await super().run_action(action, default_namespace, namespaces)
        if not done and isinstance(action, str) and isinstance(default_namespace, InstanceScreen):
            default_namespace.say_why_not(action)
        return done

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's palette commands less its Quit (an exit at once: no unsaved-edits warning, no
        leave/stop choice); the palette's one quit is vtui's, "app: quit" (`commands.py`)."""
        for command in super().get_system_commands(screen):
            if command.title != "Quit" and command.callback != self.action_quit:
                yield command

    async def action_quit(self) -> None:
        """Textual's quit action (its ctrl+q binding): vtui's quit dialog, like `q`, not an exit at once."""
        self.action_quit_dialog()

    def action_quit_dialog(self) -> None:
        from vtui.ui.screens.dialogs import QuitScreen

        if isinstance(self.screen, QuitScreen):
            return  # already asking
        self.push_screen(QuitScreen(unsaved=self.store.dirty, edits=self.store.pending), self._quit_answered)

    def _quit_answered(self, answer: str | None) -> None:
        if answer == "save":
            self.save_then_quit()
        elif answer in ("leave", "stop"):
            self._close_and_exit(answer == "stop")

    def _close_and_exit(self, stop_instances: bool) -> None:
        async def close() -> None:
            try:
                await self.bridge.close(stop_instances=stop_instances)
            finally:
                self.exit(0)

        self.run_worker(close(), group="shutdown", exit_on_error=False)

    def open_screen(self, kind: str, name: str) -> None:
        from vtui.ui.screens.bench import BenchScreen
        from vtui.ui.screens.detail import DetailScreen
        from vtui.ui.screens.flags import FlagEditorScreen
        from vtui.ui.screens.logs import LogScreen
        from vtui.ui.screens.presets import PresetScreen
        from vtui.ui.screens.tune import TuneScreen

        cls: type[Screen[None]] = {
            "detail": DetailScreen,
            "logs": LogScreen,
            "flags": FlagEditorScreen,
            "presets": PresetScreen,
            "bench": BenchScreen,
            "tune": TuneScreen,
        }[kind]
        self.push_screen(cls(name))


def _freeze_heap() -> None:
    """Move what the start built (Textual's widgets and styles, modules, the backfilled history: some
    100k objects) out of the cyclic collector's sight: its full collections then walk only what came
    since, not everything (each walk of everything paused the UI thread for 20-40 ms: a fifth of its CPU
    at 32 instances in `benchmarks/bench_ui_breakdown.py`). The young generations are collected first
    (a few ms; a full collection would pause for as long as the walks this avoids); frozen objects are
    still freed when nothing refers to them, only a cycle among them would stay."""
    gc.collect(1)
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


# -- the factory ---------------------------------------------------------------------------------------
def resolve_layout(layout: str | Path | Layout | None) -> Layout:
    """A Layout from a path, the last session, or the demo; NoLayoutError when there is none (the
    session supervisor is handed a layout file: there is nothing to supervise without one)."""
    if isinstance(layout, Layout):
        return layout
    if layout is None:
        layout = default_layout()  # the last session (one record with the CLI's), else the demo
        if layout is None:
            raise NoLayoutError("no layout given, none used before and no shipped demo: pass a layout file")
    from vtui.telemetry.flagschema import load_resolved  # here: not on the first frame's import path

    return load_resolved(Path(layout))[0]  # its instances' vLLMs' flags, as `vtui up` reads them


def default_supervisor_factory(layout: Layout) -> SupervisorApi:
    """The session supervisor's client, started on demand as the CLI's commands start it: it owns the
    instances and outlives the dashboard, which is only its client. The layout is handed over by its
    file (a layout with no file is refused there, and the dashboard says so)."""
    from vtui.service.remote import RemoteSupervisor

    return RemoteSupervisor(layout)


def with_hosts(factory: SupervisorFactory, hosts: Sequence[str]) -> SupervisorFactory:
    """The factory's supervisor plus a link to each host's sessions (new links for each layout opened)."""
    from vtui.service.hosts import HostLink
    from vtui.service.multihost import Fleet

    targets = tuple(hosts)

    def make(layout: Layout) -> SupervisorApi:
        return Fleet(factory(layout), [HostLink(t) for t in targets])

    return make


def make_app(
    layout: str | Path | Layout | None = None,
    *,
    supervisor: SupervisorApi | None = None,
    supervisor_factory: SupervisorFactory | None = None,
    gpu_sampler: GpuSamplerFactory | bool | None = None,
    autostart: bool = True,
    clock: Callable[[], float] | None = None,
    keymap_path: Path | None = None,
    bench_runner: BenchRunner = run_bench,
    settings: UiSettings | None = None,
    hosts: Sequence[str] = (),
) -> VtuiApp:
    """The one way to build the app. `gpu_sampler`/`scraper`: factories, None for the real ones, False
    for none. `clock`: wall-clock time for uptimes and countdowns (tests pass a fixed one). `hosts`:
    ssh targets whose session supervisors the dashboard shows beside this machine's (`--host`)."""
    factory = supervisor_factory or default_supervisor_factory
    if hosts:
        factory = with_hosts(factory, hosts)
    if supervisor is None:
        supervisor = factory(resolve_layout(layout))
    keymap, problems = load_user_keymap(keymap_path)
    if settings is None:
        settings, setting_problems = load_settings()
        problems = [*problems, *setting_problems]
    app = VtuiApp(
        supervisor,
        supervisor_factory=factory,
        autostart=autostart,
        gpu_sampler=gpu_sampler,
        clock=clock or time.time,
        keymap=keymap,
        bench_runner=bench_runner,
    )
    app.keymap_problems = problems
    app.settings = settings
    if isinstance(layout, (str, Path)):
        app.store.path = Path(layout)
    return app


def run_tui(argv: list[str]) -> int:
    """`vtui [LAYOUT]`: open the dashboard on LAYOUT (default: the last session, else the demo)."""
    parser = argparse.ArgumentParser(prog="vtui", description="open the vtui dashboard")
    parser.add_argument(
        "layout", nargs="?", help="layout TOML or shipped name (default: last session, else demo)"
    )
    parser.add_argument("--no-start", action="store_true", help="adopt running instances but start nothing")
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="[USER@]HOST",
        help="also show the sessions running on HOST, over ssh (repeatable; ssh: $VTUI_SSH)",
    )
    args = parser.parse_args(argv)
    try:
        app = make_app(args.layout, autostart=not args.no_start, hosts=args.host)
    except LayoutError as exc:
        print(f"vtui: {exc}")
        return 2
    if app.store.path and last_layout() != Path(app.store.path).expanduser().resolve():
        remember_last(app.store.path)  # (two fsyncs: only when it changes, not on every start)
    result = app.run()
    return int(result or 0)
