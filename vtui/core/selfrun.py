"""The command line that runs a vtui module in a child process: the one home of that argv (the session
supervisor, the sim engine and its EngineCore/device children, the router wrapper, detached tunes).

Why not `python -m vtui.X`: `-m` puts the current directory first on `sys.path`, so a `vtui/` folder
there (a clone, a checkout of something else with an `__init__.py`) is imported instead of the installed
package, and the supervisor would run that code. The choices, on Python 3.10-3.13:

- `-I` (isolated) does not insert the directory, but it also ignores every `PYTHON*` variable
  (`PYTHONPATH` included: the sim's EngineCore child, started under its own title, finds vtui through
  it, see `vtui.sim.child.child_env`) and drops the user site-packages (a `pip install --user` vtui).
- `-P` / `PYTHONSAFEPATH` exist from 3.11 only; vtui supports 3.10.
- A neutral working directory would change the child's cwd, which a layout's relative paths, the
  user's `vllm serve` and the sim rely on.

So the child runs a one-line bootstrap with `-c`: `-c` inserts exactly one entry, `''` (the current
directory), at `sys.path[0]`; the bootstrap removes it (when present: under `PYTHONSAFEPATH` there is
none), then runs the module with `runpy._run_module_as_main`, the function the interpreter's own `-m`
calls (same `__main__` module, `sys.argv[0]` set to the module's file), so the module behaves exactly
as under `-m`. Everything else is kept: the cwd, the environment, `PYTHONPATH`, user site-packages.
The module's name stays a word of its own on the command line (after the bootstrap), which is what
`vtui.supervisor.discovery` and process scans match (`vtui.sim`, `vtui.service`).
"""

from __future__ import annotations

import sys

# `sys.path[0] or ...`: pop only the '' that -c put there. `sys.argv` is ['-c', MODULE, *args] here.
BOOTSTRAP = "import runpy, sys; sys.path[0] or sys.path.pop(0); runpy._run_module_as_main(sys.argv.pop(1))"


def module_argv(module: str, *args: str, program: str | None = None) -> list[str]:
    """The argv that runs `python -m module args...` with this interpreter, minus the current directory
    on `sys.path` (see the module docstring). `program`: argv[0] when the caller passes the interpreter
    as Popen's `executable` (a child under a process title of its own); else `sys.executable`."""
    return [program or sys.executable, "-c", BOOTSTRAP, module, *args]


def as_dash_m(argv: list[str]) -> list[str]:
    """`argv` as a reader expects it: the bootstrap of `module_argv` written as the `-m MODULE` it
    stands for (a dashboard column; a copyable command keeps the exact argv)."""
    if len(argv) >= 4 and argv[1:3] == ["-c", BOOTSTRAP]:
        return [argv[0], "-m", *argv[3:]]
    return argv
