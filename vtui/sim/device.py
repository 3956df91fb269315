"""Real CUDA memory for `--sim-device cuda`: the sim holds its weights, activation workspace and KV cache
as real allocations (torch) on the GPUs CUDA_VISIBLE_DEVICES gives it, so NVML, nvidia-smi and vtui see
it as they would see vLLM. With `--sim-engine-child` the memory is held by the `VLLM::EngineCore` child
(like vLLM's engine core, it outlives a SIGKILLed parent and keeps the memory).

vLLM's V1 memory steps, which `vtui.sim.cli` follows with real figures: a snapshot at start (free memory
below utilization × total fails the start), weights, a profile that charges every byte the device lost
since the snapshot and that this process did not allocate to its own non-torch memory (so two instances
starting at once on one GPU count each other's memory), then the KV cache from what is left.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import astuple, dataclass, replace
from typing import Any

from vtui.core.selfrun import module_argv
from vtui.sim.child import child_env

NAME = "VLLM::EngineCore"
_HELD: list[Any] = []  # keeps this process's allocations alive until it exits


class DeviceUnavailable(RuntimeError):
    """torch or CUDA is missing: `--sim-device cuda` cannot hold real memory here."""


class CudaOutOfMemory(RuntimeError):
    """torch's own out-of-memory message (names the processes holding the GPU)."""


@dataclass(frozen=True)
class MemInfo:
    """One GPU as this process sees it: free and total (cudaMemGetInfo), and what torch here reserved."""

    free: int
    total: int
    reserved: int


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise DeviceUnavailable(
            f"--sim-device cuda needs torch with CUDA, and torch is not installed ({exc})"
        ) from exc
    if not torch.cuda.is_available():
        raise DeviceUnavailable(
            "--sim-device cuda needs a CUDA GPU, and torch.cuda.is_available() is False "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})"
        )
    return torch


class LocalMemory:
    """CUDA memory held by this process on its first `count` visible GPUs (one per TP × PP rank)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.torch: Any = None
        self.tensors: list[Any] = []
        self.sizes: dict[str, int] = {}  # tag -> bytes per device, as allocated
        self.by_tag: dict[str, list[Any]] = {}

    @property
    def pid(self) -> int:
        return os.getpid()

    def open(self) -> list[MemInfo]:
        """Create the CUDA contexts; the snapshot vLLM takes at start."""
        torch = _torch()
        have = torch.cuda.device_count()
        if have < self.count:
            raise DeviceUnavailable(
                f"please set tensor_parallel_size ({self.count}) to less than max local gpu count ({have})"
            )
        self.torch = torch
        for index in range(self.count):
            torch.empty(1, dtype=torch.uint8, device=f"cuda:{index}")  # the context, before the snapshot
        _HELD.append(self)
        return self.info()

    def info(self) -> list[MemInfo]:
        torch = self.torch
        out = []
        for index in range(self.count):
            free, total = torch.cuda.mem_get_info(index)
            out.append(MemInfo(int(free), int(total), int(torch.cuda.memory_reserved(index))))
        return out

    def allocate(self, tag: str, nbytes: int) -> None:
        """`nbytes` more on every device (the per-GPU share); torch's OOM message on failure."""
        if nbytes <= 0:
            return
        torch = self.torch
        try:
            for index in range(self.count):
                tensor = torch.empty(int(nbytes), dtype=torch.uint8, device=f"cuda:{index}")
                self.tensors.append(tensor)
                self.by_tag.setdefault(tag, []).append(tensor)
        except getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError) as exc:
            raise CudaOutOfMemory(f"torch.OutOfMemoryError: {exc}".replace("\n", " ")) from exc
        self.sizes[tag] = self.sizes.get(tag, 0) + int(nbytes)

    def release(self, tags: list[str]) -> int:
        """Sleep: drop the tensors of these tags and give the memory back to the driver (what NVML then
        shows free); the bytes freed per device."""
        freed = 0
        for tag in tags:
            gone = self.by_tag.pop(tag, [])
            if gone:
                freed += self.sizes.get(tag, 0)
            ids = {id(t) for t in gone}
            self.tensors = [t for t in self.tensors if id(t) not in ids]
            del gone
        if freed and self.torch is not None:
            self.torch.cuda.empty_cache()
        return freed

    def restore(self, tags: list[str]) -> None:
        """Wake: allocate the released tags again (torch's OOM message when the room is gone)."""
        for tag in tags:
            if tag in self.sizes and tag not in self.by_tag:
                nbytes = self.sizes.pop(tag)
                try:
                    self.allocate(tag, nbytes)
                except CudaOutOfMemory:
                    self.release([tag])  # the devices it did fit on: all or nothing
                    self.sizes[tag] = nbytes
                    raise

    def held(self) -> int:
        return sum(n for tag, n in self.sizes.items() if tag in self.by_tag)

    def close(self) -> None:
        self.tensors.clear()
        self.by_tag.clear()


class ChildMemory:
    """The same memory, held by a `VLLM::EngineCore` child that this process drives over a pipe."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.proc = subprocess.Popen(
            module_argv("vtui.sim.device", program=NAME),
            executable=sys.executable,
            env=child_env(),  # argv[0] is the title: hand over where vtui and its imports are
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            text=True,
        )
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # its ready handshake, as vLLM waits for the engine core

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _call(self, **request: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            raise DeviceUnavailable(f"{NAME} (pid {self.pid}) is gone: {exc}") from exc
        if not line:
            raise DeviceUnavailable(f"{NAME} (pid {self.pid}) exited during {request.get('op')}")
        reply = json.loads(line)
        if reply.get("error"):
            raise {"oom": CudaOutOfMemory}.get(reply.get("kind"), DeviceUnavailable)(reply["error"])
        return reply.get("result")

    def open(self) -> list[MemInfo]:
        return [MemInfo(*row) for row in self._call(op="open", count=self.count)]

    def info(self) -> list[MemInfo]:
        return [MemInfo(*row) for row in self._call(op="info")]

    def allocate(self, tag: str, nbytes: int) -> None:
        self._call(op="allocate", tag=tag, nbytes=int(nbytes))

    def release(self, tags: list[str]) -> int:
        return int(self._call(op="release", tags=list(tags)))

    def restore(self, tags: list[str]) -> None:
        self._call(op="restore", tags=list(tags))

    def held(self) -> int:
        return int(self._call(op="held"))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()


Memory = LocalMemory | ChildMemory


class DeviceSleep:
    """The engine's `SleepMemory` over real CUDA memory: a sleep frees the weights and KV tensors (in this
    process or the engine-core child), a wake allocates them again."""

    def __init__(self, mem: Memory) -> None:
        self.mem = mem

    def release(self, tags: frozenset[str]) -> int:
        return self.mem.release(sorted(tags))

    def restore(self, tags: frozenset[str]) -> None:
        from vtui.sim.gpus import WakeFailed

        try:
            self.mem.restore(sorted(tags))
        except (CudaOutOfMemory, DeviceUnavailable) as exc:
            raise WakeFailed(str(exc)) from exc

    def in_use(self) -> int:
        return self.mem.held()


def open_memory(count: int, engine_child: bool) -> Memory:
    """Where the sim's CUDA memory lives: in a `VLLM::EngineCore` child, or in the sim process itself."""
    return ChildMemory(count) if engine_child else LocalMemory(count)


# -- vLLM's memory arithmetic on real figures -----------------------------------------------------------


def tightest(infos: list[MemInfo]) -> tuple[int, MemInfo]:
    """The device with the least free memory (the one a start fails on) and its figures."""
    index = min(range(len(infos)), key=lambda i: infos[i].free)
    return index, infos[index]


def others_growth(start: list[MemInfo], now: list[MemInfo]) -> int:
    """Bytes the GPUs lost since `start` that this process's torch did not reserve: vLLM counts them as
    its own non-torch memory (whoever took them). The worst device counts."""
    grown = [max(0, (s.free - n.free) - (n.reserved - s.reserved)) for s, n in zip(start, now, strict=True)]
    return max(grown, default=0)


def charge_others(plan: Any, growth: int) -> Any:
    """The KV plan after vLLM's profile charged `growth` bytes of other processes to this instance."""
    if growth <= 0:
        return plan
    available = plan.available_bytes - growth
    per_block = plan.bytes_per_token * plan.block_size
    blocks = max(0, available // per_block) if available > 0 else 0
    return replace(plan, available_bytes=int(available), num_blocks=int(blocks))


def kv_bytes(plan: Any) -> int:
    """The KV cache a plan allocates on each GPU: whole blocks."""
    return int(plan.num_blocks) * int(plan.block_size) * int(plan.bytes_per_token)


# -- the engine-core child ----------------------------------------------------------------------------


def _set_name(name: str) -> None:
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME, as vLLM's setproctitle
    except (OSError, AttributeError):
        pass


def _serve(mem: LocalMemory, request: dict) -> Any:
    op = request.get("op")
    if op == "open":
        mem.count = int(request.get("count", mem.count))
        return [astuple(i) for i in mem.open()]
    if op == "info":
        return [astuple(i) for i in mem.info()]
    if op == "allocate":
        mem.allocate(str(request.get("tag")), int(request["nbytes"]))
        return None
    if op == "release":
        return mem.release([str(t) for t in request.get("tags", [])])
    if op == "restore":
        mem.restore([str(t) for t in request.get("tags", [])])
        return None
    if op == "held":
        return mem.held()
    raise ValueError(f"unknown op {op!r}")


def main() -> int:
    """The child: answer the parent's requests one JSON line each; once the parent is gone (its pipe
    closes, e.g. SIGKILL), keep the memory, as an orphaned vLLM engine core does, until SIGTERM."""
    _set_name(NAME)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    mem = LocalMemory(1)
    for line in sys.stdin:
        try:
            reply: dict[str, Any] = {"result": _serve(mem, json.loads(line))}
        except CudaOutOfMemory as exc:
            reply = {"error": str(exc), "kind": "oom"}
        except Exception as exc:  # noqa: BLE001 — every failure goes back to the parent in words
            reply = {"error": str(exc), "kind": "unavailable"}
        try:
            out.write(json.dumps(reply) + "\n")
            out.flush()
        except OSError:
            break
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
