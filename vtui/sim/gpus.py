"""The registry of simulated GPU memory shared by `vtui sim` instances on one machine.

Each sim instance records what it holds per (physical, simulated) GPU in one JSON file per holder pid,
so two sims pinned to one GPU see each other's memory as vLLM instances on one card do, and vtui's GPU
panel can show a simulated box when there is no NVIDIA driver. Stdlib only.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

GIB = 1 << 30


def registry_dir() -> Path:
    """Where sim instances record the memory they hold: $VTUI_SIM_GPU_DIR, else under vtui's state dir
    (VTUI_STATE_DIR, XDG_RUNTIME_DIR, XDG_STATE_HOME), so instances of one vtui session share it."""
    if env := os.environ.get("VTUI_SIM_GPU_DIR"):
        return Path(env)
    if env := os.environ.get("VTUI_STATE_DIR"):
        return Path(env) / "sim-gpus"
    if env := os.environ.get("XDG_RUNTIME_DIR"):
        return Path(env) / "vtui" / "sim-gpus"
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vtui" / "sim-gpus"


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat, counted after the last `)`: the name may
    hold spaces and parentheses); None when it is gone — a zombie (Z) or dying (X) process counts as
    gone: it holds no GPU memory, even while an init that never reaps it keeps its pid. "?" when
    /proc cannot tell but the pid exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:  # not pathlib: a GPU panel asks every second per holder
            fields = fh.read().rsplit(b")", 1)[1].split()
        return None if fields[0] in (b"Z", b"X") else fields[19].decode()
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return "?"
        except ProcessLookupError:
            return None
        except PermissionError:
            return "?"


class GpuRegistry:
    """One JSON file per holder pid: {"start": <proc start time>, "gpus": {"0": bytes, ...}}; entries of dead
    (or recycled) pids are ignored and removed. A lock file serialises check-and-claim."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or registry_dir()
        self._parsed: dict[Path, tuple[tuple[int, int], dict]] = {}  # path -> ((mtime_ns, size), its JSON)

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def holders(self) -> dict[int, dict[int, int]]:
        """pid -> {gpu: bytes} of every live holder; entries of dead or recycled pids are removed."""
        found: dict[int, dict[int, int]] = {}
        parsed: dict[Path, tuple[tuple[int, int], dict]] = {}
        for path in self.root.glob("*.json") if self.root.exists() else ():
            try:
                pid = int(path.stem)
                st = path.stat()
                stamp = (st.st_mtime_ns, st.st_size)
                known = self._parsed.get(path)
                entry = known[1] if known is not None and known[0] == stamp else json.loads(path.read_text())
            except (ValueError, OSError):
                continue
            parsed[path] = (stamp, entry)  # read again only once rewritten (a GPU panel asks every second)
            start = _start_time(pid)
            if start is None or (start != "?" and entry.get("start") not in (None, start)):
                path.unlink(missing_ok=True)
                continue
            try:
                found[pid] = {int(g): int(n) for g, n in entry.get("gpus", {}).items()}
            except (TypeError, ValueError):
                continue
        self._parsed = parsed
        return found

    def used(self, gpu: int, exclude_pid: int | None = None) -> int:
        return sum(held.get(gpu, 0) for pid, held in self.holders().items() if pid != exclude_pid)

    def claim(self, pid: int, gpus: Sequence[int], nbytes: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        data = {"start": _start_time(pid), "gpus": {str(g): nbytes for g in gpus}}
        tmp = self.root / f".{pid}.tmp"
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.root / f"{pid}.json")

    def release(self, pid: int) -> None:
        (self.root / f"{pid}.json").unlink(missing_ok=True)


class WakeFailed(RuntimeError):
    """A wake could not take back the memory its sleep freed (another process holds it now)."""


class RegistrySleep:
    """A sleeping sim's simulated memory: its registry entry shrinks by the bytes of the freed tags
    (weights, kv_cache) and grows back at the wake, which fails, as a CUDA allocation would, when other
    holders took the room meanwhile. The engine's `SleepMemory`."""

    def __init__(
        self,
        registry: GpuRegistry,
        owner: int,
        gpus: Sequence[int],
        held: int,
        tagged: Mapping[str, int],
        total: int,
    ) -> None:
        self.registry, self.owner, self.gpus = registry, owner, list(gpus)
        self.held, self.tagged, self.total = held, dict(tagged), total
        self.freed: set[str] = set()

    def in_use(self) -> int:
        return self.held - sum(self.tagged.get(t, 0) for t in self.freed)

    def release(self, tags: frozenset[str]) -> int:
        before = self.in_use()
        with self.registry.locked():
            self.freed |= tags & self.tagged.keys()
            self.registry.claim(self.owner, self.gpus, self.in_use())
        return before - self.in_use()

    def restore(self, tags: frozenset[str]) -> None:
        back = tags & self.freed
        need = self.in_use() + sum(self.tagged.get(t, 0) for t in back)
        with self.registry.locked():
            for gpu in self.gpus:
                free = self.total - self.registry.used(gpu, exclude_pid=self.owner)
                if free < need:
                    raise WakeFailed(
                        f"CUDA out of memory while waking up {sorted(back)}: GPU {gpu} has "
                        f"{max(0, free) / GIB:.2f} GiB free, {need / GIB:.2f} GiB needed "
                        "(another process took the memory freed by the sleep)"
                    )
            self.freed -= back
            self.registry.claim(self.owner, self.gpus, self.in_use())
