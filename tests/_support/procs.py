"""Process checks shared by the test folders that launch real processes (tests/core, tests/integration)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import psutil

from vtui.supervisor.launcher import MARKER


def marked(prefix: str) -> list[psutil.Process]:
    """Live processes whose VTUI_INSTANCE marker starts with `prefix`."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(MARKER, "").startswith(prefix):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def alive(pid: int) -> bool:
    """The pid names a process that is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_state_dir(state_dir: str) -> None:
    """SIGKILL the session supervisors (`python -m vtui.service`) running on `state_dir`, then every
    instance process started under it (they inherit VTUI_STATE_DIR): supervisors first, so none
    relaunches what is being killed."""
    supervisors, instances = [], []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if env.get("VTUI_STATE_DIR") != state_dir or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if "vtui.service" in proc.cmdline():
                supervisors.append(proc)
            elif MARKER in env:
                instances.append(proc)
        except psutil.Error:
            continue
    kill_all(supervisors)
    # Looked for again once the supervisors are dead: one may have launched an instance after the scan.
    kill_all(instances + [p for p in marked_in(state_dir) if p not in instances])


def kill_all(group: list[psutil.Process]) -> None:
    """SIGKILL each process (gone ones passed over) and wait up to 3 s for them to end."""
    for proc in group:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(group, timeout=3)


def marked_in(state_dir: str) -> list[psutil.Process]:
    """Marked processes of `state_dir` found after its supervisors died (a launch under way)."""
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if env.get("VTUI_STATE_DIR") == state_dir and MARKER in env:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def under_state_dirs(prefix: str) -> list[tuple[psutil.Process, dict[str, str]]]:
    """Live processes (zombies passed over) whose VTUI_STATE_DIR is `prefix` or a folder under it, each
    with its environment: what a script given a private temp folder left running."""
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            state = env.get("VTUI_STATE_DIR", "")
            if (state == prefix or state.startswith(prefix.rstrip("/") + "/")) and (
                proc.status() != psutil.STATUS_ZOMBIE
            ):
                found.append((proc, env))
        except psutil.Error:
            continue
    return found


@dataclass(frozen=True)
class ProcessRow:
    """What the end-of-run leak check reads of one process (a fake list in its tests)."""

    pid: int
    name: str
    cmdline: list[str]
    create_time: float
    ppid: int
    status: str  # psutil's: "zombie" (psutil.STATUS_ZOMBIE), "sleeping", …
    environ: Callable[[], dict[str, str]]  # read only for a server's command line (a /proc read each)


def process_rows() -> Iterator[ProcessRow]:
    """This machine's processes, as ProcessRows (those gone or unreadable meanwhile passed over)."""
    for proc in psutil.process_iter(["name", "cmdline", "create_time", "ppid", "status"]):
        info = proc.info
        if info["create_time"] is None:
            continue
        yield ProcessRow(
            proc.pid,
            info["name"] or "",
            list(info["cmdline"] or []),
            info["create_time"],
            info["ppid"] or 0,
            info["status"] or "",
            proc.environ,
        )


def left_behind(rows: Iterable[ProcessRow], started: float, base: str) -> tuple[list[str], list[str]]:
    """The processes a test run left behind, as (leaks, zombies), each named "PID TITLE" (a zombie with
    its state: "PID NAME (state Z)"). Born after `started`, either:

    - a `VLLM::` process (EngineCore, Worker: their environment is overwritten by their new title, so no
      marker can be read) orphaned (its parent is init);
    - a `vllm serve` or `vtui sim` server (supervisor.discovery's `kind_of`) whose state dir is under `base`
      (the run's base temp dir, so a neighbour's run on the machine is not ours).

    A zombie holds no memory and no port: it is no leak, only named. Its cmdline reads empty, so its
    name (the kernel's 15-character comm) stands for it."""
    from vtui.supervisor.discovery import kind_of

    leaked: list[str] = []
    zombies: list[str] = []
    for row in rows:
        if row.create_time < started:
            continue
        title = (row.cmdline or [row.name])[0]
        orphan = title.startswith("VLLM::") and row.ppid == 1
        try:
            server = not orphan and bool(
                kind_of(row.cmdline) and row.environ().get("VTUI_STATE_DIR", "").startswith(base)
            )
        except psutil.Error:
            continue
        if row.status == psutil.STATUS_ZOMBIE and (orphan or server):
            zombies.append(f"{row.pid} {row.name} (state Z)")
        elif orphan:
            leaked.append(f"{row.pid} {title}")
        elif server:
            leaked.append(f"{row.pid} {' '.join(row.cmdline)[:120]}")
    return leaked, zombies
