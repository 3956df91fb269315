"""Small modal dialogs: flag diff before restart, yes/no confirmation, path prompt, quit stop-or-leave."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from vtui.ui import fmt
from vtui.ui.keymap import CONFIRM_BINDINGS, DIFF_BINDINGS, PATH_BINDINGS, QUIT_BINDINGS
from vtui.ui.widgets.ordered_input import OrderedInput


def flag_diff(old: Mapping[str, object], new: Mapping[str, object]) -> list[tuple[str, str, str, str]]:
    """(mark, name, old, new) per changed flag: `+` added, `-` removed, `~` changed."""
    rows = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            rows.append(("-", name, fmt.flag_value(old[name]), ""))
        elif name not in old:
            rows.append(("+", name, "", fmt.flag_value(new[name])))
        elif old[name] != new[name]:
            rows.append(("~", name, fmt.flag_value(old[name]), fmt.flag_value(new[name])))
    return rows


def diff_text(old: Mapping[str, object], new: Mapping[str, object]) -> Text:
    out = Text()
    for mark, name, before, after in flag_diff(old, new):
        style = {"+": "green", "-": "red", "~": "yellow"}[mark]
        if mark == "~":
            out.append(f"{mark} --{name}: {before} -> {after}\n", style=style)
        else:
            out.append(f"{mark} --{name} {before or after}\n", style=style)
    return out or Text("(no changes)")


def spec_changes(old, new) -> dict[str, tuple[object, object]]:
    """Spec fields other than flags that differ (a fix may move the port)."""
    return {
        f: (getattr(old, f), getattr(new, f))
        for f in ("port", "host", "gpus", "model")
        if getattr(old, f) != getattr(new, f)
    }


class DiffScreen(ModalScreen[bool]):
    """Old vs new flags; enter restarts with the new ones, escape cancels."""

    BINDINGS = [*DIFF_BINDINGS]

    def __init__(
        self,
        instance: str,
        old: Mapping[str, object],
        new: Mapping[str, object],
        title: str = "",
        fields: Mapping[str, tuple[object, object]] | None = None,
    ) -> None:
        super().__init__()
        self.instance, self.old, self.new, self.title_text = instance, old, new, title
        self.fields = dict(fields or {})

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(
                self.title_text or f"Restart {self.instance} with these flag changes?", classes="dialog-title"
            )
            text = Text()
            for name, (before, after) in self.fields.items():
                text.append(f"~ {name}: {before} -> {after}\n", style="yellow")
            if flag_diff(self.old, self.new) or not self.fields:
                text.append_text(diff_text(self.old, self.new))
            yield Static(text, id="diff")
            yield Static("enter/y: restart   escape/n: cancel (esc closes)", classes="dialog-keys")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [*CONFIRM_BINDINGS]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="dialog-title")
            yield Static("y: yes   escape/n: no (esc closes)", classes="dialog-keys")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class PathScreen(ModalScreen[str | None]):
    BINDINGS = [*PATH_BINDINGS]

    def __init__(self, title: str, value: str = "") -> None:
        super().__init__()
        self.title_text, self.value = title, value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            yield OrderedInput(self.value, id="path-input")
            yield Static("enter: ok   escape: cancel (esc closes)", classes="dialog-keys")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class QuitScreen(ModalScreen[str | None]):
    """Leave the instances running (default; re-adopted next time) or stop them, then quit; with unsaved
    layout changes it says so first and offers to save them (stopping would lose them for good: a later
    vtui starts from the file)."""

    BINDINGS = [*QUIT_BINDINGS]

    def __init__(self, unsaved: bool = False, edits: Iterable[str] = ()) -> None:
        super().__init__()
        self.unsaved = unsaved
        self.edits = sorted(edits)  # instances with flag edits not applied yet

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("Quit vtui", classes="dialog-title")
            if self.unsaved:
                yield Static(
                    Text(
                        "[+] The layout has unsaved changes: quitting loses them\n"
                        "(stopping all does too). w saves them first.\n",
                        style="bold yellow",
                    ),
                    id="quit-unsaved",
                )
            if self.edits:
                yield Static(
                    Text(
                        f"[+] Flag edits of {', '.join(self.edits)} are not applied: the session\n"
                        "supervisor keeps them (the flag editor shows them next time).\n",
                        style="bold yellow",
                    ),
                    id="quit-edits",
                )
            keys = "w: save the layout, leave instances running, quit\n" if self.unsaved else ""
            yield Static(
                keys + "enter/l: leave instances running (re-adopted next time)\n"
                "s: stop all instances, then quit",
            )
            yield Static("escape: cancel (esc closes)", classes="dialog-keys")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "answer" and parameters == ("save",) and not self.unsaved:
            return False
        return True

    def action_answer(self, value: str | None) -> None:
        self.dismiss(value)
