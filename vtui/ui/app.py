"""The Textual App and its one factory, `make_app`, used by the CLI (`run_tui`) and by the tests alike.

The App composes screens, starts the bridge and owns the store: its message handlers are the only code
that mutates UI state. It keeps only what Textual looks up on the App (message handlers, the actions its
keys name, Textual's hooks) and hands the rest to parts that keep their own state:

- `screens` (vtui.ui.stack.Screens): the screen stack redrawn from the store, screens opened;
- `notices` (vtui.ui.notices.Notices): notifications on the screens' notice line, "why not" warnings;
- `key_order` (vtui.ui.keyorder.KeyOrder): the keys of a burst, one after another;
- `control` (vtui.ui.control.InstanceControl): what the user asks of the supervisor about instances;
- `layout_files` (vtui.ui.layout_files.LayoutFiles): save, save as, open;
- `quitting` (vtui.ui.quitting.Quitting): the quit dialog and its answers;
- `history` (vtui.ui.history.HistoryFiles): the flag history on disk;
- `model_configs` (vtui.ui.lookups.ModelConfigs): the planner's model configs (`lookups.diagnose`:
  a failed run's diagnosis);
- `startup` (vtui.ui.startup.Startup): the first frame, the collector around the start.

Supervisor calls and file I/O run in workers (of those parts).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events
from textual.actions import ActionParseResult
from textual.app import App, SystemCommand
from textual.dom import DOMNode
from textual.screen import Screen
from textual.theme import Theme

from vtui.core.api import SupervisorApi, TelemetryFeed
from vtui.core.model import Layout
from vtui.layouts import LayoutError, NoLayoutError, default_layout, last_layout, remember_last
from vtui.layouts.lookup import BUILTIN_DIR
from vtui.ui.bridge import Bridge, GpuSamplerFactory
from vtui.ui.commands import VtuiCommands
from vtui.ui.control import InstanceControl
from vtui.ui.history import HistoryFiles
from vtui.ui.keymap import APP_BINDINGS, load_user_keymap
from vtui.ui.keyorder import KeyOrder
from vtui.ui.layout_files import LayoutFiles
from vtui.ui.lookups import ModelConfigs, diagnose
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
from vtui.ui.notices import Notices
from vtui.ui.quitting import Quitting
from vtui.ui.screens.base import InstanceScreen
from vtui.ui.screens.dashboard import DashboardScreen
from vtui.ui.settings import UiSettings, load_settings
from vtui.ui.stack import Screens
from vtui.ui.startup import Startup
from vtui.ui.store import Store
from vtui.ui.textual_private import NoticeRoutingApp

if TYPE_CHECKING:  # the first frame imports only what it shows (screens, bench, planner: on use)
    from vtui.bench import BenchConfig, BenchResult
    from vtui.bench.engine import ProgressCallback

DEMO_LAYOUT = BUILTIN_DIR / "demo.toml"
SupervisorFactory = Callable[[Layout], SupervisorApi]
BenchRunner = Callable[["BenchConfig", "ProgressCallback | None"], Awaitable["BenchResult"]]


async def run_bench(config: BenchConfig, on_progress: ProgressCallback | None = None) -> BenchResult:
    """vtui.bench.run_bench, imported when a bench first runs (not at start)."""
    from vtui.bench import run_bench as run

    return await run(config, on_progress)


RENDER_INTERVAL = 1.0  # seconds between render passes of samples (state changes render at once)
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


class VtuiApp(NoticeRoutingApp[int]):
    CSS_PATH = "vtui.tcss"
    TITLE = "vtui"
    BINDINGS = [*APP_BINDINGS]
    COMMANDS = App.COMMANDS | {VtuiCommands}
    ENABLE_COMMAND_PALETTE = True
    settings: UiSettings = UiSettings()

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
        self.bridge = Bridge(self, supervisor, autostart=autostart, gpu_sampler=gpu_sampler)
        self.user_keymap = keymap or {}
        self.keymap_problems: list[str] = []
        self.screens = Screens(self)
        self.notices = Notices(self)
        self.notice_router = self.notices.route
        self.key_order = KeyOrder(self, super().on_event)
        self.control = InstanceControl(self)
        self.layout_files = LayoutFiles(self)
        self.quitting = Quitting(self)
        self.history = HistoryFiles(self)
        self.model_configs = ModelConfigs(self)
        self.startup = Startup(self)

    # -- lifecycle -----------------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.register_theme(HIGH_CONTRAST)
        self.theme_changed_signal.subscribe(self, lambda _theme: self.screens.refresh(None))
        if self.user_keymap:
            self.set_keymap(self.user_keymap)
        for problem in self.keymap_problems:
            self.notify(problem, severity="warning", timeout=10)
        self.push_screen(DashboardScreen())
        self.bridge.start()
        self.history.load()
        # One render pass per second for samples and uptimes: N instances cost one repaint, not N.
        self.set_interval(RENDER_INTERVAL, self.repaint)
        self.call_after_refresh(self.startup.first_frame)

    def on_unmount(self) -> None:
        self.bridge.stop_sources()

    def repaint(self) -> None:
        """One render pass of every screen from the store (the render timer's callback; state changes
        repaint at once, samples wait for it)."""
        self.screens.refresh(None)

    # -- handlers: the only place that mutates the store ---------------------------------------------
    def on_statuses_changed(self, message: StatusesChanged) -> None:
        feed = self.supervisor if isinstance(self.supervisor, TelemetryFeed) else None
        changed = self.store.apply_statuses(
            message.statuses, self.supervisor.layout, feed.facts if feed is not None else None
        )
        sup = self.supervisor  # another dashboard's flag edits, rebased when their instance restarted
        if self.store.set_pending(sup.pending_edits(), sup.pending_conflicts()):
            self.screens.refresh(None)
        for name in changed:
            view = self.store.views[name]
            if view.needs_diagnosis:
                view.needs_diagnosis = False
                diagnose(self, name, list(view.run_lines), view.spec.gpus if view.spec else ())
        if changed:
            self.screens.refresh(changed)
            self.history.persist()

    def on_history_loaded(self, message: HistoryLoaded) -> None:
        if message.session != self.store.layout.session.name:
            return  # another layout opened meanwhile
        for name, records in message.records.items():
            self.store.merge_history(name, records)
        self.screens.refresh(None)
        self.history.loaded()

    def on_diagnosis_ready(self, message: DiagnosisReady) -> None:
        if self.store.set_diagnosis(message.instance, message.facts, message.problems):
            self.screens.refresh([message.instance])

    def on_metrics_arrived(self, message: MetricsArrived) -> None:
        self.store.add_sample(message.sample)  # the next render pass shows it

    def on_metrics_backfill(self, message: MetricsBackfill) -> None:
        self.store.add_backfill(message.backfill)

    def on_hosts_changed(self, message: HostsChanged) -> None:
        self.store.set_hosts(message.hosts)
        self.screens.refresh(None)

    def on_gpu_arrived(self, message: GpuArrived) -> None:
        first = (self.store.gpu if message.host is None else self.store.host_gpus.get(message.host)) is None
        self.store.set_gpu(message.sample, message.host)
        if first:  # else the next render pass shows it
            self.screens.refresh_gpu()

    def on_logs_arrived(self, message: LogsArrived) -> None:
        if self.store.add_logs(message.instance, message.lines, message.skipped):
            self.screens.append_logs(message.instance, message.lines, message.skipped)

    def on_telemetry_batch(self, message: TelemetryBatch) -> None:
        for instance, lines, skipped in message.logs:
            if self.store.add_logs(instance, lines, skipped):
                self.screens.append_logs(instance, lines, skipped)
        for sample in message.samples:
            self.store.add_sample(sample)  # the next render pass shows them

    def on_supervisor_failed(self, message: SupervisorFailed) -> None:
        self.store.supervisor_error = message.error
        self.notify(f"the supervisor stopped: {message.error}", severity="error", timeout=30)
        self.screens.refresh(None)

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
        self.screens.refresh(None)

    async def on_layout_opened(self, message: LayoutOpened) -> None:
        await self.bridge.close(stop_instances=False)
        self.supervisor = self.supervisor_factory(message.layout)
        self.store = Store(self.supervisor.layout)
        self.history.load()
        self.bridge = Bridge(self, self.supervisor, autostart=self._autostart, gpu_sampler=self._gpu_sampler)
        self.screens.back_to_dashboard()
        self.bridge.start()
        if message.layout.path:
            remember_last(message.layout.path)
        self.notify(f"opened {message.layout.path}")

    def on_config_loaded(self, message: ConfigLoaded) -> None:
        self.model_configs.loaded(message.key)
        self.store.configs[message.key] = (message.config, message.reason)
        self.screens.refresh(None)

    def on_bench_recorded(self, message: BenchRecorded) -> None:
        if self.store.attach_bench(message.instance, message.summary):
            self.screens.refresh([message.instance])
            self.history.persist()

    async def on_event(self, event: events.Event) -> None:
        """Keys go through `key_order`: each acts once the one before it has played out."""
        if isinstance(event, events.Key) and not event.is_forwarded:
            await self.key_order.take(event)
            return
        await super().on_event(event)

    # -- Textual's hooks -------------------------------------------------------------------------------
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

    # -- app actions (APP_BINDINGS) --------------------------------------------------------------------
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

    async def action_quit(self) -> None:
        """Textual's quit action (its ctrl+q binding): vtui's quit dialog, like `q`, not an exit at once."""
        self.quitting.ask()

    def action_quit_dialog(self) -> None:
        self.quitting.ask()

    def action_save_layout(self) -> None:
        self.layout_files.save()

    def action_save_layout_as(self) -> None:
        self.layout_files.save_as()

    def action_open_layout(self) -> None:
        self.layout_files.open()


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
