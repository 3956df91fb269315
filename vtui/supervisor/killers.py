"""Known outside killers of vLLM processes, and who may have sent an instance its signal.

What Linux tells: the pid and uid of a signal's sender are in the siginfo (`si_pid`, `si_uid`) that the
*receiving* process gets — vLLM, not vtui. The parent side (`waitpid`, `waitid`, a pidfd) only gives the
child's status: exited with a code, or killed by signal N (and whether it dumped core), never the
sender. (A tracer, an audit rule `auditctl -a always,exit -F arch=b64 -S kill`, or eBPF on
`signal_generate` would see the sender; all need root or kernel setup that vtui does not assume.)
So the practical answer is an audit at exit time: the running processes that are known to kill vLLM.

Known killers:
- `vllm-cli` (PyPI): `vllm-cli status` SIGTERMs every vLLM process on the machine when it exits;
- vLLM's `benchmarks/auto_tune` script (`auto_tune.sh`): runs `pkill -f vllm` between its runs;
- `pkill` / `killall` with "vllm" in their arguments; `kill` naming one of the instance's pids.

Stdlib only (reads /proc): the log pump (`supervisor.logfile`, which must not import vtui) loads this file by
path to audit the moment its child dies; `vtui check` uses it to warn.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

KILLER_COMMANDS = ("vllm-cli",)  # installed commands worth a warning (`shutil.which`)


@dataclass(frozen=True)
class ProcInfo:
    """One process as /proc shows it: its pid and argv."""

    pid: int
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Killer:
    """A running process that kills (or may have killed) vLLM processes."""

    pid: int
    kind: str  # "vllm-cli" | "auto_tune" | "pkill" | "killall" | "kill"
    command: str  # its argv, joined, cut to 200 characters

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        return f"{self.kind} (pid {self.pid}: {self.command})"


def scan_processes(proc_root: Path = Path("/proc")) -> list[ProcInfo]:
    """Every readable process's argv (kernel threads and vanished processes are skipped)."""
    found: list[ProcInfo] = []
    try:
        entries = list(proc_root.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        argv = tuple(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)
        if argv:
            found.append(ProcInfo(int(entry.name), argv))
    return found


def _base(arg: str) -> str:
    return os.path.basename(arg)


_INTERPRETERS = ("bash", "sh", "dash", "zsh", "env")


def _programs(argv: tuple[str, ...]) -> list[str]:
    """What a process runs: its program, and for an interpreter the script or `-m` module it runs."""
    first = _base(argv[0])
    out = [first]
    if first.startswith(("python", "pypy")) or first in _INTERPRETERS:
        for i, arg in enumerate(argv[1:], 1):
            if arg == "-m" and i + 1 < len(argv):
                out.append(argv[i + 1])
                break
            if arg in ("-c", "-"):
                break
            if not arg.startswith("-"):
                out.append(_base(arg))
                break
    return out


def classify(proc: ProcInfo, target_pids: Collection[int] = ()) -> str | None:
    """The kind of known killer `proc` is, or None."""
    argv = proc.argv
    programs = _programs(argv)
    if any(n in ("vllm-cli", "vllm_cli") or n.startswith("vllm_cli.") for n in programs):
        return "vllm-cli"
    if any(n.startswith("auto_tune") for n in programs):
        return "auto_tune"
    program, rest = programs[0], argv[1:]
    if program in ("pkill", "killall") and any("vllm" in a.lower() for a in rest):
        return program
    if (
        program == "kill"
        and target_pids
        and any(a.lstrip("-").isdigit() and int(a) in target_pids for a in rest)
    ):
        return "kill"
    return None


def find_killers(
    processes: Iterable[ProcInfo], target_pids: Collection[int] = (), exclude: Collection[int] = ()
) -> list[Killer]:
    """The known killers among `processes` (vtui's own pids in `exclude`), in pid order."""
    out = []
    for proc in processes:
        if proc.pid in exclude:
            continue
        kind = classify(proc, target_pids)
        if kind is not None:
            out.append(Killer(proc.pid, kind, " ".join(proc.argv)[:200]))
    return sorted(out, key=lambda k: k.pid)


def audit(target_pids: Collection[int] = (), processes: Iterable[ProcInfo] | None = None) -> list[Killer]:
    """The known killers running now (this process excluded): call it the moment an instance died."""
    procs = scan_processes() if processes is None else processes
    return find_killers(procs, target_pids, exclude={os.getpid()})


def installed(which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """'NAME (PATH)' for each known killer command on PATH."""
    return [f"{name} ({path})" for name in KILLER_COMMANDS if (path := which(name))]


def warnings(
    processes: Iterable[ProcInfo] | None = None, which: Callable[[str], str | None] = shutil.which
) -> list[str]:
    """`vtui check`'s lines about known killers installed or running."""
    lines = [
        f"{entry} is installed: `vllm-cli status` SIGTERMs every vLLM process on the machine when it exits"
        for entry in installed(which)
    ]
    lines += [
        f"{k.describe()} is running: it kills vLLM processes (vtui counts such an exit as a failure)"
        for k in audit(processes=processes)
    ]
    return lines
