"""Process checks shared by the test folders that launch real processes (tests/core, tests/integration)."""

from __future__ import annotations

import psutil

from vtui.core.launcher import MARKER


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
