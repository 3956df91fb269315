"""The dashboard: a card per instance and the GPU panel; side by side on wide terminals."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.containers import Container, VerticalScroll
from textual.widgets import Footer, Static

from vtui.ui.keymap import DASHBOARD_BINDINGS, INSTANCE_BINDINGS
from vtui.ui.screens.base import InstanceScreen
from vtui.ui.store import Store
from vtui.ui.widgets.gpu_panel import GpuPanel
from vtui.ui.widgets.instance_card import InstanceCard
from vtui.ui.widgets.titlebar import TitleBar

CARD_LINES = 3  # .card height in vtui.tcss
WIDE = 150  # columns from which the GPU panel moves to the right of the cards


class DashboardScreen(InstanceScreen):
    BINDINGS = [*INSTANCE_BINDINGS, *DASHBOARD_BINDINGS]

    def __init__(self) -> None:
        super().__init__(id="dashboard")
        self.selected = 0
        self._cards: list[
            InstanceCard
        ] = []  # kept from rebuild(): a DOM query per tick cost more than the cards

    def compose(self) -> ComposeResult:
        yield TitleBar()
        yield Static(id="supervisor-error", classes="error-banner")
        with Container(id="body"):
            yield VerticalScroll(id="cards")
            yield GpuPanel()
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.query_one("#supervisor-error").display = False
        self.rebuild()

    def on_screen_resume(self) -> None:
        self.refresh_view(self.app.store)

    def on_resize(self) -> None:
        self.set_class(self.size.width >= WIDE, "wide")
        for card in self._cards:  # shorter names on narrow terminals leave room for data
            card.name_width = min(card.full_name_width, 14) if self.size.width < 100 else card.full_name_width

    def rebuild(self) -> None:
        """(Re)create the cards for the store's instances (on mount and when another layout opens)."""
        store: Store = self.app.store
        cards = self.query_one("#cards", VerticalScroll)
        cards.remove_children()
        names = store.names()
        if names:
            name_width = max(8, min(24, max(len(n) for n in names)))
            new = [InstanceCard(n, name_width) for n in names]
            cards.mount_all(new)
            self._cards = new
        else:
            self._cards = []
            cards.mount(
                Static(
                    "No instances in this layout. Open one with `o` (e.g. layouts/demo.toml).",
                    classes="empty",
                )
            )
        self.selected = min(self.selected, max(0, len(names) - 1))
        self.call_after_refresh(self.refresh_view, store)

    def selected_name(self) -> str | None:
        names = self.app.store.names()
        return names[self.selected] if 0 <= self.selected < len(names) else None

    def refresh_view(self, store: Store, names: Iterable[str] | None = None) -> None:
        if not self.is_active and names is None and self.app.screen.is_modal is False:
            return  # hidden under a full screen: on_screen_resume repaints it
        self.query_one(TitleBar).refresh_from(store)
        self._show_supervisor_error(store.supervisor_error)
        now = self.app.clock()
        wanted = set(names) if names is not None else None
        first, last = self._visible_range()
        for i, card in enumerate(self._cards):
            if not card.composed:
                continue
            if card.has_class("selected") != (i == self.selected):  # no CSS update unless it moved
                card.set_class(i == self.selected, "selected")
            if (
                (card.instance in wanted)
                if wanted is not None
                else (first <= i <= last or card._view is None)
            ):
                view = store.views.get(card.instance)
                if view is not None:
                    card.update_view(view, now)
        self.refresh_gpu(store)
        self.refresh_bindings_if_changed()

    def _show_supervisor_error(self, error: str | None) -> None:
        banner = self.query_one("#supervisor-error", Static)
        if error is not None and not banner.display:
            banner.update(
                f"The supervisor stopped: {error}\nThe states below are the last known ones; nothing is "
                "watched or restarted. Quit (q, leave running) and start vtui again to re-adopt the instances."
            )
        banner.display = error is not None

    def _visible_range(self) -> tuple[int, int]:
        """Indices of the cards in the scrolled view (cards are CARD_LINES tall), without asking the
        compositor per card (`is_on_screen` rebuilt its whole map every tick)."""
        cards = self.query_one("#cards", VerticalScroll)
        top = int(cards.scroll_offset.y)
        height = cards.size.height or self.size.height
        return top // CARD_LINES, (top + height) // CARD_LINES

    def refresh_gpu(self, store: Store) -> None:
        self.query_one(GpuPanel).update_sample(store.gpu, store.names())

    def action_select(self, delta: int) -> None:
        cards = [card for card in self._cards if card.composed]
        if not cards:
            return
        self.selected = (self.selected + delta) % len(cards)
        for i, card in enumerate(cards):
            card.set_class(i == self.selected, "selected")
        self.query_one("#cards", VerticalScroll).scroll_to_widget(cards[self.selected], animate=False)
        self.call_after_refresh(self.refresh_view, self.app.store)  # cards scrolled into view
        self.refresh_bindings_if_changed()

    def action_start_all(self) -> None:
        self.app.start_instances(None)
