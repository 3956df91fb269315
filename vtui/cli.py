"""vtui's command line. `vtui [LAYOUT]` opens the TUI; `vtui COMMAND …` runs a headless subcommand.

Each subcommand lives in its own module under vtui/commands (or vtui/sim for `sim`) exposing HELP,
add_arguments(parser) and run(args) -> int; only the chosen one is imported, so `vtui ps` never pays
for Textual.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> module. Keep alphabetical within groups.
COMMANDS: dict[str, str] = {
    # supervision (foundation)
    "up": "vtui.commands.up",
    "down": "vtui.commands.down",
    "ps": "vtui.commands.ps",
    "logs": "vtui.commands.logs",
    "restart": "vtui.commands.restart",
    "check": "vtui.commands.check",
    # engines and telemetry
    "sim": "vtui.sim.cli",
    "diagnose": "vtui.commands.diagnose",
    "metrics": "vtui.commands.metrics",
    # planning and load tests
    "plan": "vtui.commands.plan",
    "bench": "vtui.commands.bench",
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
        except Exception:  # a subcommand that cannot load still gets listed
            help_text = "(unavailable)"
        lines.append(f"  {name:<10} {help_text}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
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
    # Anything else: the TUI, optionally on a layout path.
    try:
        tui = importlib.import_module("vtui.ui.app")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("vtui.ui"):
            print("vtui: the dashboard is not available in this build; try `vtui ps`", file=sys.stderr)
            return 1
        raise
    return int(tui.run_tui(argv) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
