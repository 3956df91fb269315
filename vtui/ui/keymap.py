"""Every key vtui answers to, as Bindings with ids, plus the user's overrides from keys.toml.

Every Binding of every screen is declared here (`REGISTRY`); screens only pick their list. Ids are
"noun.verb" so the help screen, the command palette and `paths.config_dir()/keys.toml`
(`[keys]` table: `"instance.restart" = "ctrl+r"`) all speak the same names.
"""

from __future__ import annotations

import sys
from pathlib import Path

from textual.binding import Binding

from vtui.core import paths

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

APP_BINDINGS = [
    Binding("question_mark", "help", "Help", id="app.help", key_display="?"),
    Binding("q", "quit_dialog", "Quit", id="app.quit"),
    Binding("ctrl+s", "save_layout", "Save", id="layout.save"),
    Binding("S", "save_layout_as", "Save as", id="layout.save_as", show=False),
    Binding("o", "open_layout", "Open", id="layout.open", show=False),
    Binding("ctrl+t", "cycle_theme", "Theme", id="app.theme", show=False),
]

INSTANCE_BINDINGS = [
    Binding("enter", "detail", "Detail", id="instance.detail", key_display="enter"),
    Binding("l", "logs", "Logs", id="instance.logs"),
    Binding("f", "flags", "Flags", id="instance.flags"),
    Binding("p", "presets", "Presets", id="instance.presets"),
    Binding("r", "restart", "Restart", id="instance.restart"),
    Binding("s", "start", "Start", id="instance.start"),
    Binding("x", "stop", "Stop", id="instance.stop"),
    Binding("b", "rollback", "Rollback", id="instance.rollback"),
    Binding("B", "bench", "Bench", id="instance.bench"),
    Binding("z", "sleep_toggle", "Sleep/wake", id="instance.sleep_toggle", show=False),  # help, palette
    Binding("T", "tune", "Tune", id="instance.tune", show=False),  # help, palette
]

DASHBOARD_BINDINGS = [
    Binding("down,j", "select(1)", "Next", id="dashboard.next", show=False),
    Binding("up,k", "select(-1)", "Previous", id="dashboard.previous", show=False),
    Binding("A", "start_all", "Start all", id="dashboard.start_all", show=False),
    Binding("slash", "filter", "Filter", id="dashboard.filter", key_display="/"),
    Binding("colon", "command_line", "Command", id="dashboard.command", key_display=":", show=False),
    Binding("greater_than_sign", "sort(1)", "Sort", id="dashboard.sort_next", key_display=">"),
    Binding("less_than_sign", "sort(-1)", "Sort back", id="dashboard.sort_previous", show=False),
    Binding("I", "sort_reverse", "Invert sort", id="dashboard.sort_reverse", show=False),
]

FILTER_BINDINGS = [Binding("escape", "clear", "Clear filter", id="filter.clear")]

COMMAND_LINE_BINDINGS = [
    Binding("escape", "close", "Close", id="command.close"),
    Binding("tab", "complete", "Complete", id="command.complete", priority=True),
]

DETAIL_BINDINGS = [
    Binding("escape", "back", "Back", id="detail.back"),
    Binding("c", "copy_command", "Copy cmd", id="detail.copy_command"),
    Binding("w", "window", "5m/1h", id="detail.window"),
    Binding("1", "fix(0)", "Fix 1", id="detail.fix1"),
    Binding("2", "fix(1)", "Fix 2", id="detail.fix2", show=False),
    Binding("3", "fix(2)", "Fix 3", id="detail.fix3", show=False),
]

LOG_BINDINGS = [
    Binding("escape", "back", "Back", id="logs.back"),
    Binding("slash", "filter", "Filter", id="logs.filter", key_display="/"),
    Binding("F", "toggle_follow", "Follow", id="logs.follow"),
    Binding("end,G", "follow", "Follow", id="logs.end", show=False),
    Binding("P", "toggle_probes", "Probes", id="logs.probes"),
    Binding("e", "first_error", "First error", id="logs.first_error"),
    Binding("E", "next_error", "Next error", id="logs.next_error", show=False),
]

FLAG_BINDINGS = [
    Binding("escape", "back", "Back", id="flags.cancel"),  # edits not applied are kept
    # priority: the flag list's scroll container would take up/down for scrolling
    Binding("up", "app.focus_previous", "Prev field", id="flags.previous", priority=True),
    Binding("down", "app.focus_next", "Next field", id="flags.next", priority=True),
    Binding("ctrl+r", "review", "Diff+restart", id="flags.review", priority=True),
    Binding("ctrl+z", "discard", "Discard", id="flags.discard", priority=True),
]


BENCH_BINDINGS = [
    Binding("ctrl+r", "run", "Run", id="bench.run", priority=True),
    Binding("ctrl+x", "cancel", "Cancel run", id="bench.cancel", priority=True),
    Binding("escape", "back", "Back", id="bench.back"),
]


TUNE_BINDINGS = [
    Binding("ctrl+r", "start", "Start tune", id="tune.start", priority=True),
    Binding("ctrl+x", "abort", "Abort", id="tune.abort", priority=True),
    Binding("ctrl+u", "resume", "Resume", id="tune.resume", priority=True),
    Binding("escape", "back", "Back", id="tune.back"),
]


PRESET_BINDINGS = [
    Binding("a", "apply('A')", "Preset A", id="preset.a"),
    Binding("b", "apply('B')", "Preset B", id="preset.b"),
    Binding("escape", "close", "Cancel", id="preset.cancel"),
]

DIFF_BINDINGS = [
    Binding("enter,y", "answer(True)", "Restart", id="diff.restart"),
    Binding("escape,n", "answer(False)", "Cancel", id="diff.cancel"),
]

CONFIRM_BINDINGS = [
    Binding("y", "answer(True)", "Yes", id="confirm.yes"),
    Binding("escape,n", "answer(False)", "No", id="confirm.no"),
]

PATH_BINDINGS = [Binding("escape", "cancel", "Cancel", id="path.cancel")]

QUIT_BINDINGS = [
    Binding("w", "answer('save')", "Save, then quit", id="quit.save"),
    Binding("enter,l", "answer('leave')", "Leave running", id="quit.leave"),
    Binding("s", "answer('stop')", "Stop all", id="quit.stop"),
    Binding("escape", "answer(None)", "Cancel", id="quit.cancel"),
]

HELP_BINDINGS = [Binding("escape,question_mark,q", "close", "Close", id="help.close")]

# The one registry: every binding of every screen, by where it applies (the help screen's sections).
REGISTRY: dict[str, list[Binding]] = {
    "app": APP_BINDINGS,
    "instance (dashboard, detail)": INSTANCE_BINDINGS,
    "dashboard": DASHBOARD_BINDINGS,
    "dashboard filter": FILTER_BINDINGS,
    "command line": COMMAND_LINE_BINDINGS,
    "detail": DETAIL_BINDINGS,
    "logs": LOG_BINDINGS,
    "flag editor": FLAG_BINDINGS,
    "bench": BENCH_BINDINGS,
    "tune": TUNE_BINDINGS,
    "presets": PRESET_BINDINGS,
    "flag diff": DIFF_BINDINGS,
    "confirm": CONFIRM_BINDINGS,
    "path prompt": PATH_BINDINGS,
    "quit": QUIT_BINDINGS,
    "help": HELP_BINDINGS,
}


def all_binding_ids() -> set[str]:
    return {b.id for group in REGISTRY.values() for b in group if b.id}


def keys_file() -> Path:
    return paths.config_dir() / "keys.toml"


def load_user_keymap(path: Path | None = None) -> tuple[dict[str, str], list[str]]:
    """The user's {binding id: keys} overrides and a list of problems (unknown ids, bad file)."""
    path = path or keys_file()
    if not path.exists():
        return {}, []
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return {}, [f"{path}: {exc}"]
    table = doc.get("keys", doc)
    known = all_binding_ids()
    keymap: dict[str, str] = {}
    problems: list[str] = []
    for ident, keys in table.items():
        if not isinstance(keys, str):
            problems.append(f'{path}: keys.{ident}: expected a string like "ctrl+r"')
        elif ident not in known:
            problems.append(f"{path}: keys.{ident}: unknown binding id")
        else:
            keymap[ident] = keys
    return keymap, problems
