"""Start: preflight, the launch order (stagger, a shared GPU's neighbours first), the GPU memory check
just before each launch, the spawn in a thread, and the run record written ahead of it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

from vtui.core.gpu import attribute
from vtui.core.instance import Instance, SpawnError
from vtui.core.model import InstanceSpec
from vtui.core.refusals import PreflightError
from vtui.core.state import State
from vtui.supervisor.attached import Attached
from vtui.supervisor.logfile import LogTailer
from vtui.supervisor.opqueue import Operation, Runner
from vtui.supervisor.preflight import gpu_memory_check, preflight
from vtui.supervisor.supervision import intent_record, launch_spec, log_path_for, run_record
from vtui.supervisor.supervisor_base import SupervisorBase


class LaunchMixin(SupervisorBase):
    async def start(self, names: Iterable[str] | None = None, force: bool = False) -> None:
        """Preflight, then launch (in layout order; after each instance's stagger; one after another
        on a shared GPU; each after the GPU memory check). Returns once every named instance has been
        spawned (or failed to spawn); raises PreflightError naming what the memory check refused
        (unless `force`). Live and adopted instances are left alone.

        Through each instance's operation queue (`supervisor.opqueue`): the instances with nothing
        running start together as one batch (one preflight over all of them); one busy with another
        operation joins or waits for it by the queue's table."""
        self._ensure_loops()
        if not self._adopted_once:
            await self.adopt()
        wanted = self._names(names)
        if names is None:  # "everything" does not fight a stop under way (a replica scaled away)
            wanted = [n for n in wanted if not self._queue(n).stopping]
        free = [n for n in wanted if self._queue(n).idle]
        ops = [self._queue(n).submit("start", self._starter([n], force)) for n in wanted if n not in free]
        if free:
            batch = asyncio.ensure_future(self._do_start(free, force))
            ops += [self._queue(n).submit("start", _joiner(batch)) for n in free]
        results = await asyncio.gather(*(asyncio.shield(op.future) for op in ops), return_exceptions=True)
        refused: list[str] = []
        for result in results:
            if isinstance(result, PreflightError):
                refused += [p for p in result.problems if p not in refused]
            elif isinstance(result, BaseException):
                raise result
        if refused:
            raise PreflightError(refused)

    def _starter(self, names: list[str], force: bool) -> Runner:
        async def run(_op: Operation) -> None:
            await self._do_start(names, force)

        return run

    async def _do_start(self, wanted: list[str], force: bool = False) -> None:
        """`start` itself, for instances whose queue this operation holds."""
        unprobed = [i for n in wanted if isinstance(i := self.instances[n], Attached) and not i.probed]
        await self._probe_attached(unprobed)  # starting an attached server: watching it
        todo = [
            n
            for n in wanted
            if not isinstance(self.instances[n], Attached)
            and not self.instances[n].state.running
            and n not in self._pending
        ]
        if not todo:
            return
        if self.check_preflight:
            running = [n for n, i in self.instances.items() if i.state.running or n in self._pending]
            result = preflight(self._layout, todo, running=running)
            if result.problems:
                raise PreflightError(result.problems)
            for line in result.warnings:
                self._notice(None, "warning", line)
            for line in result.notes:
                self._notice(None, "info", line)
        for name in todo:
            self._fresh_start(name)
            self.instances[name].attempt = 0
            self._refusals.pop(name, None)
            self._pending[name] = asyncio.create_task(
                self._launch_when_clear(name, initial=True, force=force)
            )
        await asyncio.gather(*(self._pending[n] for n in todo if n in self._pending), return_exceptions=True)
        refused = [line for n in todo for line in self._refusals.pop(n, [])]
        if refused:
            raise PreflightError(refused)

    def _fresh_start(self, name: str) -> None:
        """A start the user asked for: the last run's outcome is history now, and an instance restored
        with the flags it last ran with starts with the layout's (what `_note_lost_flags` says)."""
        self.store.clear_outcome(self.session, name)
        layout_spec = self._restored_layout.pop(name, None)
        if layout_spec is not None:
            self.instances[name].spec = layout_spec
            self._set_layout_spec(layout_spec)
            self._rebase_edits(name)

    def _blocked_by(self, name: str) -> list[str]:
        """GPU neighbours this instance must wait for: still profiling memory, or queued before it."""
        return self._gate.blocked_by(name, self.instances, self._pending, self._layout.names())

    async def _launch_when_clear(self, name: str, *, initial: bool, force: bool = False) -> None:
        inst = self.instances[name]
        try:
            if initial and inst.spec.start_stagger > 0:
                await self.clock.sleep(inst.spec.start_stagger)
            noted = False
            while blockers := self._blocked_by(name):
                if not noted:
                    self._notice(
                        name,
                        "info",
                        f"{name} waits for {', '.join(blockers)} to allocate its KV cache (shared GPU)",
                    )
                    noted = True
                await self.clock.sleep(self.poll_interval)
            await self._sweeper.settle(name)
            if not await self._gpu_memory_ok(inst, force=force):
                return
            await self._launch_now(inst)
        finally:
            self._pending.pop(name, None)

    async def _gpu_memory_ok(self, inst: Instance, *, force: bool) -> bool:
        """`preflight.gpu_memory_check` just before the launch (after the stagger, a shared GPU's
        neighbours and the sweep): the free memory the new process will find. A refusal of a start
        asked for is kept for `start` to raise; a policy restart refused goes BACKOFF -> FAILED."""
        name = inst.spec.name
        spec = launch_spec(inst.spec, self._layout.session)
        if not self.check_preflight or spec.engine == "router" or self._gate.cpu_only_vllm(spec):
            return True
        sample = await asyncio.to_thread(self._sample_gpus, spec)
        result = gpu_memory_check(spec, sample, force=force or spec.force_start)
        for line in result.warnings:
            self._notice(name, "warning", line)
        if not result.problems:
            return True
        self._notice(name, "error", "; ".join(result.problems))
        if inst.state is State.BACKOFF:
            inst.refuse_restart("; ".join(result.problems))
        else:
            self._refusals[name] = result.problems
        return False

    def _sample_gpus(self, spec: InstanceSpec) -> Any:
        """The GPUs as the launch will find them, from the source the instance runs on
        (`core.gpu.GpuSources.for_instance`: the simulated box for a sim, else NVML / AMD SMI), each
        process named by its instance."""
        sample = self.gpus.for_instance(spec).sample()
        return attribute(sample, self.owners({p.pid for p in sample.processes}))

    async def _launch_now(self, inst: Instance) -> None:
        """STARTING, then the blocking spawn (up to a few 100 ms: fork, exec, the pump's handshake) in a
        thread, so instances launched together never hold the event loop. A stop during the spawn
        (it cancels this task, then waits for it) still gets the process: it is attached and recorded
        before the cancellation goes on, and the stop path ends it like any other."""
        name = inst.spec.name
        old = self._tailers.pop(name, None)
        if old is not None:
            old.close()
        inst.log_path = log_path_for(self.session, name)
        self._tailers[name] = LogTailer(inst.log_path)
        if not inst.begin_launch():
            return
        spec = launch_spec(inst.spec, self._layout.session, cpu_vllm=self._gate.cpu_only_vllm(inst.spec))
        intent = intent_record(inst, spec, self.session, self._layout, self.clock)
        log_path = inst.log_path

        def spawn() -> Any:
            self.store.save(intent)  # written ahead: a launcher killed mid-spawn leaves a findable trace
            return self.launcher.spawn(spec, log_path=log_path, session=self.session)

        fut = asyncio.ensure_future(asyncio.to_thread(spawn))
        try:
            handle = await asyncio.shield(fut)
        except asyncio.CancelledError:
            while not fut.done():  # the spawn cannot be taken back: wait for its process
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(fut)
            if fut.exception() is None:
                inst.attach(fut.result())
                self._save_record(inst)
            else:
                self.store.remove(self.session, name)
                inst.spawn_failed(fut.exception())  # type: ignore[arg-type]
            raise
        except Exception as exc:  # noqa: BLE001 — SpawnError/OSError expected; any other is said, not raised
            if not isinstance(exc, (SpawnError, OSError)):
                self._notice(name, "error", f"{name}: spawn failed unexpectedly: {exc!r}")
            self.store.remove(self.session, name)
            inst.spawn_failed(exc)
            return
        inst.attach(handle)
        await asyncio.to_thread(self._save_record, inst)

    def _save_record(self, inst: Instance) -> None:
        handle = inst.handle
        if handle is None:
            return
        self.store.save(run_record(inst, handle, self.session, self._layout, self.clock))


def _joiner(batch: asyncio.Future[None]) -> Runner:
    """One queue's share of a batch start: done when the batch is (not cancelled with one queue)."""

    async def run(_op: Operation) -> None:
        await asyncio.shield(batch)

    return run
