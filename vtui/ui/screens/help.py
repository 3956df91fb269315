"""Help generated from the live bindings of the screen it was opened on (remapped keys included)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from vtui.ui.keymap import keys_file


def help_text(rows: list[tuple[str, str, str, bool]]) -> Text:
    out = Text("Keys (greyed: not available right now)\n\n", style="bold")
    for key, description, ident, enabled in rows:
        style = "" if enabled else "dim"
        out.append(f"  {key:<14}", style="bold cyan" if enabled else "dim")
        out.append(f"{description:<22}", style=style)
        out.append(f"{ident}\n", style="dim")
    out.append(
        f'\nctrl+p opens the command palette ("instance: restart NAME", "layout: save as...").\n'
        f'Remap keys in {keys_file()} under [keys], e.g. "instance.restart" = "ctrl+r".\n',
        style="dim",
    )
    return out


def live_rows(screen) -> list[tuple[str, str, str, bool]]:
    """(key, description, id, enabled) for every binding active on `screen`, grouped by id."""
    seen: dict[str, tuple[str, str, str, bool]] = {}
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


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "close", "Close", id="help.close")]

    def __init__(self, rows: list[tuple[str, str, str, bool]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog", id="help"):
            yield Static(help_text(self.rows))

    def action_close(self) -> None:
        self.dismiss(None)
