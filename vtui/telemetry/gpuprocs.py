"""The command line of a GPU-holding process, read once per process (psutil): the GPU panel's last column,
for every GPU source that lists processes (NVML, AMD SMI)."""

from __future__ import annotations

from vtui.core.gpu import GpuProcess

__all__ = ["COMMAND_CHARS", "CommandCache", "process_command"]

COMMAND_CHARS = 200  # longest command kept (the GPU panel cuts it to its width anyway)


def process_command(pid: int) -> tuple[float, str] | None:
    """(create time, command line) of a process: its program as a base name, then its arguments (vLLM's
    engine and workers show their process titles, `VLLM::EngineCore`); None when it is gone or not
    ours to read."""
    import os

    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            created = proc.create_time()
            argv = proc.cmdline() or [proc.name()]
    except (psutil.Error, OSError):
        return None
    if not argv or not argv[0]:
        return None
    return created, " ".join([os.path.basename(argv[0]), *argv[1:]])[:COMMAND_CHARS]


class CommandCache:
    """Each GPU process's command line, read once per process: a pid seen again is checked by its
    create time (a recycled pid gets its own command); pids gone from the GPUs are forgotten."""

    def __init__(self) -> None:
        self._commands: dict[int, tuple[float, str]] = {}

    def fill(self, processes: list[GpuProcess]) -> list[GpuProcess]:
        import dataclasses

        import psutil

        known: dict[int, tuple[float, str]] = {}
        out = []
        for proc in processes:
            entry = known.get(proc.pid) or self._commands.get(proc.pid)
            if entry is not None and proc.pid not in known:
                try:
                    if psutil.Process(proc.pid).create_time() != entry[0]:
                        entry = None
                except (psutil.Error, OSError):
                    entry = None
            if entry is None:
                entry = process_command(proc.pid)
            if entry is not None:
                known[proc.pid] = entry
                proc = dataclasses.replace(proc, command=entry[1])
            out.append(proc)
        self._commands = known
        return out
