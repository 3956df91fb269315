"""Help: the live bindings of the screen it was opened on (greyed where they do not apply now), then
every other binding of the registry by screen; remapped keys shown as remapped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from vtui.ui.keymap import HELP_BINDINGS, REGISTRY, keys_file
from vtui.ui.widgets.scrollbars import whole_cell_scrollbars

Row = tuple[str, str, str, bool]  # (keys, description, id, enabled)


def _rows_text(out: Text, rows: list[Row]) -> None:
    for key, description, ident, enabled in rows:
        style = "" if enabled else "dim"
        out.append(f"  {key:<14}", style="bold cyan" if enabled else "dim")
        out.append(f"{description:<22}", style=style)
        out.append(f"{ident}\n", style="dim")


def help_text(rows: list[Row], others: Sequence[tuple[str, list[Row]]] = ()) -> Text:
    out = Text("Keys (greyed: not available right now)", style="bold")
    out.append("   esc closes\n\n", style="bold cyan")
    _rows_text(out, rows)
    for group, group_rows in others:
        out.append(f"\nOn {group}\n", style="bold")
        _rows_text(out, group_rows)
    out.append(
        f'\nctrl+p opens the command palette ("instance: restart NAME", "layout: save as...").\n'
        f'Remap any id above in {keys_file()} under [keys], e.g. "instance.restart" = "ctrl+r".\n',
        style="dim",
    )
    return out


def live_rows(screen: Screen[object]) -> list[Row]:
    """(key, description, id, enabled) for every binding active on `screen`, grouped by id."""
    seen: dict[str, Row] = {}
    for active in screen.active_bindings.values():
        b = active.binding
        if not b.description or b.system or not (b.id or b.action == "command_palette"):
            continue  # widget-internal keys (scrolling, focus) are not vtui's
        ident = b.id or b.action
        display = screen.app.get_key_display(b)
        if ident in seen:
            k, d, i, e = seen[ident]
            seen[ident] = (f"{k}/{display}", d, i, e)
        else:
            seen[ident] = (display, b.description, ident, bool(active.enabled))
    return sorted(seen.values(), key=lambda r: r[2])


def registry_rows(app: App[Any], keymap: dict[str, str], skip: set[str]) -> list[tuple[str, list[Row]]]:
    """Every registered binding not in `skip`, by screen, with the user's keys where remapped."""
    groups: list[tuple[str, list[Row]]] = []
    for group, bindings in REGISTRY.items():
        rows: list[Row] = []
        for b in bindings:
            if not b.id or b.id in skip:
                continue
            keys = keymap.get(b.id, b.key).split(",")
            display = "/".join(app.get_key_display(replace(b, key=k.strip())) for k in keys)
            rows.append((display, b.description, b.id, True))
        if rows:
            groups.append((group, rows))
    return groups


class HelpScreen(ModalScreen[None]):
    BINDINGS = [*HELP_BINDINGS]

    def __init__(self, rows: list[Row], others: list[tuple[str, list[Row]]] | None = None) -> None:
        super().__init__()
        self.rows = rows
        self.others = others or []

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog", id="help"):
            yield Static(help_text(self.rows, self.others))

    def on_mount(self) -> None:
        # whole cells, as the log and detail screens' bars: a thumb drawn in eighths of a cell moved by a
        # fraction of a row with the moment the layout settled (CI drew it once without its top eighth)
        whole_cell_scrollbars(self.query_one("#help", VerticalScroll))

    def action_close(self) -> None:
        self.dismiss(None)
