"""The dashboard: the fleet table (a row per instance, an ALL row), the selected instance's pane with
labelled sparklines where the terminal is tall enough, and the GPU panel (beside them from 150
columns). `/` filters the table, `<` `>` `I` sort it, a click selects a row, `:` opens the command line
(k9s style: `:restart qwen`, `:stop`, `:theme`, `:q`; vtui.ui.cmdline) on the notice line's row."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.await_complete import AwaitComplete
from textual.containers import Container, Horizontal, Vertical
from textual.suggester import Suggester
from textual.widgets import Input, Label, Static

from vtui.ui import actions, cmdline
from vtui.ui.compositor import LeanCompositor
from vtui.ui.keymap import COMMAND_LINE_BINDINGS, DASHBOARD_BINDINGS, FILTER_BINDINGS, INSTANCE_BINDINGS
from vtui.ui.screens.base import InstanceScreen
from vtui.ui.store import Store
from vtui.ui.textual_private import use_compositor
from vtui.ui.widgets.footer import LeanFooter
from vtui.ui.widgets.gpu_panel import GpuPanel
from vtui.ui.widgets.instance_pane import InstancePane, short_command
from vtui.ui.widgets.instance_table import FleetTable
from vtui.ui.widgets.notices import NoticeLine
from vtui.ui.widgets.titlebar import TitleBar

WIDE = 150  # columns from which the GPU panel moves to the right of the table


class FilterInput(Input):
    """The `/` filter: typing filters the rows; enter keeps the filter, escape clears it."""

    BINDINGS = [*FILTER_BINDINGS]  # type: ignore[list-item]

    def action_clear(self) -> None:
        self.value = ""
        self.screen.close_filter()  # type: ignore[attr-defined]


class CommandSuggester(Suggester):
    """Completes the command line from the key registry, the instances and the themes."""

    def __init__(self, screen: DashboardScreen) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self._screen = screen

    async def get_suggestion(self, value: str) -> str | None:
        return _completion(self._screen, value)


def _completion(screen: DashboardScreen, value: str) -> str | None:
    app = screen.app
    return cmdline.complete(value, app.store.names(), sorted(app.available_themes))


class CommandInput(Input):
    """The `:` line: enter runs, tab (or →) takes the completion, escape closes."""

    BINDINGS = [*COMMAND_LINE_BINDINGS]  # type: ignore[list-item]

    def action_close(self) -> None:
        self.screen.close_command_line()  # type: ignore[attr-defined]

    def action_complete(self) -> None:
        # what the suggester shows, computed now (Input keeps it in private state)
        suggestion = _completion(self.screen, self.value)  # type: ignore[arg-type]
        if suggestion:
            self.value = suggestion + ("" if suggestion.endswith(" ") else " ")
            self.cursor_position = len(self.value)


class DashboardScreen(InstanceScreen):
    BINDINGS = [*INSTANCE_BINDINGS, *DASHBOARD_BINDINGS]
    AUTO_FOCUS = None  # the filter box takes the keys only after `/`

    def __init__(self) -> None:
        super().__init__(id="dashboard")
        use_compositor(self, LeanCompositor())  # a fleet repaint renders the fleet, not the whole screen
        self._commands: dict[str, str] = {}
        # the widgets each render pass updates, kept (a query per widget per pass walks the DOM)
        self._title = TitleBar()
        self._banner = Static(id="supervisor-error", classes="error-banner")
        self._table = FleetTable(id="fleet")
        self._pane = InstancePane()
        self._gpu = GpuPanel()
        self._notice = NoticeLine(": command line   / filter   ? keys")
        self._boxes: tuple[FilterInput, CommandInput] | None = None
        self._boxes_mounted: AwaitComplete | None = None

    def compose(self) -> ComposeResult:
        yield self._title
        yield self._banner
        with Container(id="body"):
            with Vertical(id="main"):
                yield self._table
                yield Static(
                    "No instances in this layout. Open one with `o` (e.g. layouts/demo.toml).",
                    classes="empty",
                    id="empty",
                )
                yield self._pane
            yield self._gpu
        yield self._notice
        yield LeanFooter(show_command_palette=False, compact=True)

    async def _input_boxes(self) -> tuple[FilterInput, CommandInput]:
        """The `/` filter box and the `:` line, mounted on first use (before the notice line and after
        it, where compose would put them): hidden until then, they would cost the first frame the styles
        of two Inputs (each with five component classes) for nothing."""
        if self._boxes is None:
            box = FilterInput(
                placeholder="filter rows: name, model or state (enter keeps, esc clears)", id="fleet-filter"
            )
            box.display = box.can_focus = False  # takes keys only after `/`
            command = CommandInput(
                placeholder="restart NAME, stop, bench, theme, q ... (tab completes, esc closes)",
                id="command-input",
                suggester=CommandSuggester(self),
            )
            command.can_focus = False  # takes keys only after `:`
            line = Horizontal(Label(":", id="command-prompt"), command, id="command-line")
            line.display = False
            self._boxes = (box, command)
            self._boxes_mounted = AwaitComplete(
                self.mount(box, before=self._notice), self.mount(line, after=self._notice)
            )
        assert self._boxes_mounted is not None
        await self._boxes_mounted
        return self._boxes

    @property
    def table(self) -> FleetTable:
        return self._table

    def on_mount(self) -> None:
        self.query_one("#supervisor-error").display = False
        self.set_focus(None)
        self.rebuild()

    def on_screen_resume(self) -> None:
        self.refresh_view(self.app.store)

    def on_resize(self) -> None:
        self.set_class(self.size.width >= WIDE, "wide")

    def rebuild(self) -> None:
        """Show the store's instances (on mount and when another layout opens)."""
        store: Store = self.app.store
        names = store.names()
        self.table.set_names(names)
        self.query_one("#empty").display = not names
        self.table.display = bool(names)
        self._commands = {}
        self.call_after_refresh(self.refresh_view, store)

    def selected_name(self) -> str | None:
        return self.table.selected if self.is_mounted else None

    def refresh_view(self, store: Store, names: Iterable[str] | None = None) -> None:
        if not self.is_active and names is None and self.app.screen.is_modal is False:
            return  # hidden under a full screen: on_screen_resume repaints it
        self._title.refresh_from(store)
        self._show_supervisor_error(store.supervisor_error)
        now = self.app.clock()
        table = self.table
        table.update_from(store, now)
        self._refresh_pane(store, now)
        self.refresh_gpu(store)
        self.refresh_bindings_if_changed()

    def _refresh_pane(self, store: Store, now: float) -> None:
        name = self.table.selected
        self._pane.update_view(store.views.get(name) if name else None, store, now)

    def _show_supervisor_error(self, error: str | None) -> None:
        banner = self._banner
        if error is not None and not banner.display:
            banner.update(
                f"The supervisor stopped: {error}\nThe states below are the last known ones; nothing is "
                "watched or restarted. Quit (q, leave running) and start vtui again to re-adopt the instances."
            )
        if banner.display != (error is not None):
            banner.display = error is not None

    def refresh_gpu(self, store: Store) -> None:
        for name, view in store.views.items():
            if name not in self._commands and view.spec is not None:
                self._commands[name] = short_command(view.spec)
        hosts = [(host, store.host_gpus.get(label)) for label, host in store.hosts.items()]
        self._gpu.update_sample(store.gpu, store.names(), self._commands, hosts)

    # -- selection, sorting, filter ------------------------------------------------------------------
    def _after_selection(self) -> None:
        store = self.app.store
        self._refresh_pane(store, self.app.clock())
        self.refresh_bindings_if_changed()

    def action_select(self, delta: int) -> None:
        if self.table.move(delta) is not None:
            self._after_selection()

    def on_fleet_table_selected(self, message: FleetTable.Selected) -> None:
        if message.open_detail and message.name:
            self._perform("detail")
            return
        self.table.update_from(self.app.store, self.app.clock())  # a header click re-sorts
        self._after_selection()

    def action_sort(self, delta: int) -> None:
        self.table.cycle_sort(delta)
        self.table.update_from(self.app.store, self.app.clock())

    def action_sort_reverse(self) -> None:
        table = self.table
        table.reverse = not table.reverse
        table.update_from(self.app.store, self.app.clock())

    async def action_filter(self) -> None:
        box, _ = await self._input_boxes()
        box.display = box.can_focus = True
        box.focus()

    def close_filter(self) -> None:
        box = self.query_one("#fleet-filter", FilterInput)
        box.can_focus = False
        if not box.value:
            box.display = False
        self.set_focus(None)
        self._apply_filter(box.value)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "fleet-filter":
            self._apply_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "fleet-filter":
            self.close_filter()
        elif event.input.id == "command-input":
            text = event.value
            self.close_command_line()
            self.run_worker(self.run_command(text), group="command", exit_on_error=False)

    def _apply_filter(self, text: str) -> None:
        self.table.filter = text.strip()
        self.table.update_from(self.app.store, self.app.clock())
        self._after_selection()

    def action_start_all(self) -> None:
        self.app.control.start_instances(None)

    # -- the `:` command line --------------------------------------------------------------------------
    async def action_command_line(self) -> None:
        _, box = await self._input_boxes()
        self.query_one("#command-line").display = True
        box.can_focus = True
        box.value = ""
        box.focus()

    def close_command_line(self) -> None:
        box = self.query_one("#command-input", CommandInput)
        box.can_focus = False
        self.query_one("#command-line").display = False
        self.set_focus(None)

    async def run_command(self, text: str) -> bool:
        """Run one command line; a command that cannot run says why on the notice line (False)."""
        app = self.app
        try:
            command, arg = cmdline.parse(text, app.store.names(), sorted(app.available_themes))
            await self._run(command, arg)
        except cmdline.CommandError as exc:
            app.notify(str(exc), severity="error", timeout=6)
            return False
        return True

    async def _run(self, command: cmdline.Command, arg: str | None) -> None:
        app = self.app
        if command.scope == "instance":
            name = arg or self.selected_name()
            if name is None:
                raise cmdline.CommandError(f"{command.name}: no instance selected (:{command.name} NAME)")
            view = app.store.views.get(name)
            if not actions.applies(command.action, view):
                state = view.state.name if view is not None else "unknown"
                raise cmdline.CommandError(f"{command.name}: not available for {name} now ({state})")
            if name != self.selected_name():
                self.table.select(name)
                self._after_selection()
            actions.perform(app, command.action, name)
        elif command.name == "theme" and arg is not None:
            app.theme = arg
        elif command.name == "filter" and arg is not None:
            box, _ = await self._input_boxes()
            box.value = arg
            box.display = True
            self._apply_filter(arg)
        elif command.scope == "app":
            await app.run_action(command.action)
        else:
            await self.run_action(command.action)
