"""`vtui sessions install-unit [LAYOUT]` / `remove-unit [LAYOUT]`: keep a session's supervisor itself
supervised, by the user's systemd (a *user* unit: no root; `loginctl enable-linger` keeps it running
without a login, e.g. on a server reached over SSH).

The unit (`vtui-session-NAME.service` in `$XDG_CONFIG_HOME/systemd/user/`, written by the systemd export's
`supervisor_unit`) runs the supervisor as a client would start it, plus `--wait-lock` (while a supervisor
a command started holds the session, the unit's waits for it to exit, then takes over) and `--idle inf`
(it never leaves on its own). systemd restarts it when it dies; it re-adopts the instances. The
systemctl runner is injected (`SYSTEMCTL`), so tests need no systemd.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


class UnitError(Exception):
    """systemctl missing or failing: said in one line, exit 1."""


Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]
UNIT_PREFIX = "vtui-session-"
# what the supervisor needs from the environment of the command that installs the unit (the user
# manager's own is bare): where to find programs and vtui's folders; never a secret (those go in the
# EnvironmentFile the unit names, written by the user)
KEPT_ENV = (
    "PATH",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "VTUI_STATE_DIR",
    "VTUI_CONFIG_DIR",
    "XDG_STATE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "HF_HOME",
    "VTUI_SUPERVISOR_GPU",
    "CUDA_DEVICE_ORDER",
)


def systemctl(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """`systemctl --user ARGS` (the default runner; stdlib only: `vtui sessions` is imported over ssh)."""
    program = shutil.which("systemctl")
    if program is None:
        raise UnitError("systemctl not found: this machine runs no systemd (the unit needs one)")
    return subprocess.run([program, "--user", *args], capture_output=True, text=True, timeout=60)


SYSTEMCTL: Runner = systemctl


def unit_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def unit_name(session: str) -> str:
    from vtui.export.common import dns_name

    return f"{UNIT_PREFIX}{dns_name(session, set())}.service"


def env_file(session: str) -> Path:
    from vtui.core import paths

    return paths.config_dir() / f"{unit_name(session).removesuffix('.service')}.env"


def unit_text(layout_path: Path) -> tuple[str, str]:
    """(unit name, unit text) for the session of the layout file."""
    from vtui.core.selfrun import module_argv
    from vtui.export.formats import supervisor_unit
    from vtui.layouts import load_layout
    from vtui.layouts.text import var_names
    from vtui.service import locations

    layout = load_layout(layout_path, unset_ok=True)
    session = layout.session.name
    name = unit_name(session)
    argv = module_argv("vtui.service", "--layout", str(layout_path.resolve()), "--wait-lock", "--idle", "inf")
    env = {k: os.environ[k] for k in KEPT_ENV if os.environ.get(k)}
    variables = [v for _, written in layout.templates.values() for v in var_names(written)]
    unit = supervisor_unit(
        layout,
        name,
        argv,
        env,
        str(env_file(session)),
        str(locations.log_path(session)),
        variables,
    )
    return name, unit.text


def _run(runner: Runner, *args: str) -> None:
    done = runner(list(args))
    if done.returncode != 0:
        why = (done.stderr or done.stdout or "").strip().splitlines()
        raise UnitError(f"systemctl --user {' '.join(args)}: {why[-1] if why else f'exit {done.returncode}'}")


def install(args: argparse.Namespace) -> int:
    from vtui.core.atomic import atomic_write_text
    from vtui.layouts import resolve_layout_arg

    path = resolve_layout_arg(args.layout)
    name, text = unit_text(path)
    runner = SYSTEMCTL
    _run(runner, "show-environment")  # a user manager answers: else nothing is written
    target = unit_dir() / name
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, text, mode=0o644)
    _run(runner, "daemon-reload")
    _run(runner, "enable", "--now", name)
    print(f"{target}: written and enabled ({name})")
    print(
        "  the session's supervisor now runs under systemd: restarted when it dies, started at login; "
        "a supervisor a command started earlier keeps the session until it exits, then the unit's takes over"
    )
    print(f"  the layout's ${{VAR}}s, if any: NAME=value lines in {env_file(_session_of(path))} (mode 0600)")
    print("  to keep it running with no login (a server reached over SSH): loginctl enable-linger")
    return 0


def remove(args: argparse.Namespace) -> int:
    name = _installed_name(args.layout)
    target = unit_dir() / name
    if not target.exists():
        print(f"{name}: not installed ({target})")
        return 0
    runner = SYSTEMCTL
    _run(runner, "disable", "--now", name)
    target.unlink()
    _run(runner, "daemon-reload")
    print(
        f"{target}: stopped, disabled and removed (the instances run on; the next command starts a supervisor)"
    )
    return 0


def _session_of(path: Path) -> str:
    from vtui.layouts import load_layout

    return load_layout(path, unset_ok=True).session.name


def _installed_name(arg: str | None) -> str:
    """The unit of a layout's session; a session name with an installed unit works too (its layout
    file may be gone)."""
    if arg and (unit_dir() / unit_name(arg)).exists():
        return unit_name(arg)
    from vtui.layouts import resolve_layout_arg

    return unit_name(_session_of(resolve_layout_arg(arg)))


def add_arguments(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    for action, what in (
        ("install-unit", "write and enable a systemd user unit that keeps this session's supervisor running"),
        ("remove-unit", "stop, disable and remove that unit (the instances run on)"),
    ):
        p = sub.add_parser(action, help=what, description=what)
        p.add_argument(
            "layout",
            nargs="?",
            help="layout file or shipped name (default: the session last used)"
            + ("; or the session's name" if action == "remove-unit" else ""),
        )


def run(args: argparse.Namespace) -> int:
    from vtui.layouts import LayoutError, NoLayoutError

    try:
        return install(args) if args.action == "install-unit" else remove(args)
    except (UnitError, NoLayoutError) as exc:
        print(f"vtui sessions {args.action}: {exc}", file=sys.stderr)
        return 1
    except LayoutError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 2
