"""vtui's command line. `vtui [LAYOUT]` opens the TUI; `vtui COMMAND …` runs a headless subcommand.

Each subcommand lives in its own module under vtui/commands (or vtui/sim for `sim`) exposing HELP,
add_arguments(parser) and run(args) -> int; only the chosen one is imported, so `vtui ps` never pays
for Textual.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys

# name -> module. Keep alphabetical within groups.
COMMANDS: dict[str, str] = {
    # supervision (foundation)
    "up": "vtui.commands.up",
    "down": "vtui.commands.down",
    "ps": "vtui.commands.ps",
    "logs": "vtui.commands.logs",
    "restart": "vtui.commands.restart",
    "sleep": "vtui.commands.sleep",
    "wake": "vtui.commands.wake",
    "sessions": "vtui.commands.sessions",
    "handover": "vtui.commands.handover",
    "check": "vtui.commands.check",
    "export": "vtui.commands.export",
    "discover": "vtui.commands.discover",
    # engines and telemetry
    "sim": "vtui.sim.cli",
    "diagnose": "vtui.commands.diagnose",
    "metrics": "vtui.commands.metrics",
    # planning and load tests
    "plan": "vtui.commands.plan",
    "bench": "vtui.commands.bench",
    "tune": "vtui.commands.tune",
}


def _usage() -> str:
    lines = [
        "usage: vtui [LAYOUT]            open the dashboard (default: the last session, else the demo)",
        "       vtui COMMAND [ARGS…]     run a headless command",
        "",
        "commands:",
    ]
    for name, module in COMMANDS.items():
        try:
            help_text = importlib.import_module(module).HELP
        except Exception:  # noqa: BLE001 — a subcommand that cannot load (any import-time error) still gets listed
            help_text = "(unavailable)"
        lines.append(f"  {name:<10} {help_text}")
    from vtui.layouts import builtin_names

    lines += [
        "",
        "LAYOUT: a layout file, or the name of one shipped with vtui: " + ", ".join(builtin_names()),
    ]
    return "\n".join(lines)


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away


def main(argv: list[str] | None = None) -> int:
    """Run one command. A reader that goes away (`vtui metrics FILE | head -1`) ends it quietly: piping
    into `head` is normal use, so a BrokenPipeError is no traceback, in any command."""
    from vtui.service.locations import SocketDirError

    try:
        code = _main(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # a pipe closed under buffered output breaks here, not at interpreter exit
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except SocketDirError as exc:  # someone else's folder where a deep state dir's sockets go
        print(f"vtui: {exc}", file=sys.stderr)
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a test's capture)
        pass


def _layout_word(argv: list[str]) -> list[str]:
    """`vtui demo`: a shipped layout's name (or a file) as the dashboard's layout path."""
    if not argv or argv[0].startswith("-"):
        return argv
    from vtui.layouts import NoLayoutError, resolve_layout_arg

    try:
        return [str(resolve_layout_arg(argv[0])), *argv[1:]]
    except NoLayoutError:
        return argv  # the dashboard names the missing file


def _main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv and argv[0] in ("-V", "--version"):
        from vtui import __version__

        print(f"vtui {__version__}")
        return 0
    if argv and argv[0] in COMMANDS:
        name = argv[0]
        module = importlib.import_module(COMMANDS[name])
        parser = argparse.ArgumentParser(prog=f"vtui {name}", description=module.HELP)
        module.add_arguments(parser)
        if getattr(module, "PASS_THROUGH", False):
            return int(module.run(argv[1:]) or 0)
        args = parser.parse_args(argv[1:])
        return int(module.run(args) or 0)
    # Anything else: the TUI, optionally on a layout path. Its start builds some 100k objects that live
    # as long as it does (modules, Textual's widgets and styles): the cyclic collector would walk them
    # a hundred times before the first frame (0.04-0.06 s of it); vtui.ui.app turns it back on there.
    gc.disable()
    try:
        tui = importlib.import_module("vtui.ui.app")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("vtui.ui"):
            print("vtui: the dashboard is not available in this build; try `vtui ps`", file=sys.stderr)
            return 1
        raise
    return int(tui.run_tui(_layout_word(argv)) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
