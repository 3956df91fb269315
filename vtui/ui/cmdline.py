"""The `:` command line's commands, k9s style (`:restart qwen`, `:stop`, `:bench`, `:theme`, `:q`): every
binding of the app, instance and dashboard groups of the one key registry (`vtui.ui.keymap.REGISTRY`),
named by its id's verb (`instance.restart` → `restart`, `layout.save_as` → `save-as`). Instance
commands take an instance name (default: the selected one; greyed-out rules: `vtui.ui.actions`),
`theme` a theme name, `filter` the filter text. Pure: parsing and completion here, running in the
dashboard screen."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from vtui.ui.keymap import REGISTRY

SCOPES = {"app": "app", "instance (dashboard, detail)": "instance", "dashboard": "dashboard"}
ALIASES = {"q": "quit"}  # k9s' and vi's `:q`
TAKES_TEXT = {"filter"}  # dashboard commands whose argument is free text
# App actions that stay commands whether or not a key is bound to them (the theme lost its key to tune)
KEYLESS = (("theme", "cycle_theme", "Theme"),)


@dataclass(frozen=True)
class Command:
    name: str  # what is typed: "restart", "save-as"
    action: str  # the binding's Textual action: "restart", "sort(1)", "quit_dialog"
    help: str  # the binding's description
    scope: str  # "app" (the App's action), "instance" (on an instance), "dashboard" (the screen's)
    binding_id: str  # "" for a command no key is bound to


class CommandError(ValueError):
    """A command line that cannot run; the message says why and what would."""


def commands() -> dict[str, Command]:
    """Every command by name, in the registry's order."""
    out: dict[str, Command] = {}
    for group, scope in SCOPES.items():
        for binding in REGISTRY.get(group, []):
            if not binding.id or binding.id == "dashboard.command":
                continue
            name = binding.id.split(".", 1)[1].replace("_", "-")
            out.setdefault(name, Command(name, binding.action, binding.description, scope, binding.id))
    for name, action, description in KEYLESS:
        out.setdefault(name, Command(name, action, description, "app", ""))
    return out


def _lookup(word: str, table: dict[str, Command]) -> Command:
    key = ALIASES.get(word.lower(), word.lower()).replace("_", "-")
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=1)
    hint = f'; did you mean "{close[0]}"?' if close else ""
    raise CommandError(f'unknown command "{word}"{hint} (tab completes; :help lists every key)')


def parse(text: str, names: Sequence[str], themes: Sequence[str] = ()) -> tuple[Command, str | None]:
    """(command, its argument or None) of a command line; CommandError with the reason otherwise."""
    words = text.strip().removeprefix(":").split(None, 1)
    if not words:
        raise CommandError("empty command (tab completes; esc closes)")
    command = _lookup(words[0], commands())
    arg = words[1].strip() if len(words) > 1 else None
    if arg is None:
        return command, None
    if command.scope == "instance":
        if arg not in names:
            known = ", ".join(names) or "none"
            raise CommandError(f'{command.name}: no instance "{arg}" (instances: {known})')
    elif command.name == "theme":
        if arg not in themes:
            raise CommandError(f'theme: no theme "{arg}" (themes: {", ".join(themes)})')
    elif command.name not in TAKES_TEXT:
        raise CommandError(f'{command.name} takes no argument (got "{arg}")')
    return command, arg


def complete(text: str, names: Sequence[str], themes: Sequence[str] = ()) -> str | None:
    """The whole command line completed from `text` (the first command, instance or theme it is a
    prefix of), or None when nothing fits."""
    if not text.strip():
        return None
    head, sep, rest = text.partition(" ")
    table = commands()
    if not sep:
        word = head.lower()
        return next((name for name in [*table, *ALIASES] if name.startswith(word) and name != word), None)
    try:
        command = _lookup(head, table)
    except CommandError:
        return None
    choices: Sequence[str] = (
        names if command.scope == "instance" else themes if command.name == "theme" else ()
    )
    arg = rest.lstrip()
    found = next((c for c in choices if c.startswith(arg) and c != arg), None)
    return f"{head} {found}" if found is not None else None
