"""Start: preflight, the launch order (stagger, a shared GPU's neighbours first), the GPU memory check
just before each launch, the spawn in a thread, and the run record written ahead of it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable

from vtui.core.clock import Clock
from vtui.core.gpu import GpuSample, GpuSources, attribute
from vtui.core.instance import Instance, SpawnError
from vtui.core.model import InstanceSpec, Layout
from vtui.core.refusals import PreflightError
from vtui.core.state import State
from vtui.supervisor.attached import Attached
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.launcher import Launcher
from vtui.supervisor.logtails import LogTails
from vtui.supervisor.operations import Operations
from vtui.supervisor.opqueue import Operation, Runner
from vtui.supervisor.owners import ProcessOwners
from vtui.supervisor.preflight import gpu_memory_check, port_problem, preflight
from vtui.supervisor.records import Records
from vtui.supervisor.roster import Roster
from vtui.supervisor.startgate import StartGate, Sweeper
from vtui.supervisor.supervision import intent_record, launch_spec, log_path_for

__all__ = ["Launches"]


class Launches:
    """Launches of one supervisor's instances. The launches not yet spawned are the roster's `pending`;
    `gate` says who goes first on a shared GPU; the memory check reads the GPUs from `gpus`, the
    supervisor's GPU source, each process named by `owners`."""

    def __init__(
        self,
        roster: Roster,
        operations: Operations,
        records: Records,
        tails: LogTails,
        sweeper: Sweeper,
        launcher: Launcher,
        clock: Clock,
        notice: Callable[[str | None, str, str], None],
        *,
        gpus: GpuSources,
        owners: ProcessOwners,
        probe_attached: Callable[[list[Attached]], Awaitable[None]],
        poll_interval: float,
        check_preflight: bool,
    ) -> None:
        self._roster = roster
        self._operations = operations
        self._records = records
        self._tails = tails
        self._sweeper = sweeper
        self._launcher = launcher
        self._clock = clock
        self._notice = notice
        self._probe_attached = probe_attached
        self.poll_interval = poll_interval
        self.check_preflight = check_preflight
        self._gpus = gpus
        self._owners = owners
        self.gate = StartGate(lambda: len(gpus.machine.sample().gpus))  # who goes first on a shared GPU
        self._refusals: dict[str, list[str]] = {}  # launches the GPU memory check refused, by instance

    # the roster as the GPU lookups below read it
    @property
    def instances(self) -> dict[str, Instance[ProcessHandle]]:
        return self._roster.instances

    @property
    def _layout(self) -> Layout:
        return self._roster.layout

    async def start(self, names: Iterable[str] | None = None, force: bool = False) -> None:
        """Preflight, then launch (in layout order; after each instance's stagger; one after another
        on a shared GPU; each after the GPU memory check). Returns once every named instance has been
        spawned (or failed to spawn); raises PreflightError naming what the memory check refused
        (unless `force`). Live and adopted instances are left alone.

        Through each instance's operation queue (`supervisor.opqueue`): the instances with nothing
        running start together as one batch (one preflight over all of them); one busy with another
        operation joins or waits for it by the queue's table."""
        queue = self._operations.queue
        wanted = self._roster.names(names)
        if names is None:  # "everything" does not fight a stop under way (a replica scaled away)
            wanted = [n for n in wanted if not queue(n).stopping]
        free = [n for n in wanted if queue(n).idle]
        ops = [queue(n).submit("start", self._starter([n], force)) for n in wanted if n not in free]
        if free:
            batch = asyncio.ensure_future(self.do_start(free, force))
            ops += [queue(n).submit("start", _joiner(batch)) for n in free]
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
            await self.do_start(names, force)

        return run

    async def do_start(self, wanted: list[str], force: bool = False) -> None:
        """`start` itself, for instances whose queue this operation holds."""
        instances, pending = self._roster.instances, self._roster.pending
        unprobed = [i for n in wanted if isinstance(i := instances[n], Attached) and not i.probed]
        await self._probe_attached(unprobed)  # starting an attached server: watching it
        todo = [
            n
            for n in wanted
            if not isinstance(instances[n], Attached) and not instances[n].state.running and n not in pending
        ]
        if not todo:
            return
        if self.check_preflight:
            running = [n for n in instances if self._roster.active(n)]
            result = preflight(self._roster.layout, todo, running=running)
            if result.problems:
                raise PreflightError(result.problems)
            for line in result.warnings:
                self._notice(None, "warning", line)
            for line in result.notes:
                self._notice(None, "info", line)
        for name in todo:
            self._fresh_start(name)
            instances[name].attempt = 0
            self._refusals.pop(name, None)
            pending[name] = asyncio.create_task(self.launch_when_clear(name, initial=True, force=force))
        await asyncio.gather(*(pending[n] for n in todo if n in pending), return_exceptions=True)
        refused = [line for n in todo for line in self._refusals.pop(n, [])]
        if refused:
            raise PreflightError(refused)

    def _fresh_start(self, name: str) -> None:
        """A start the user asked for: the last run's outcome is history now, and an instance restored
        with the flags it last ran with starts with the layout's (what adoption said of its lost flags)."""
        self._records.store.clear_outcome(self._roster.session, name)
        layout_spec = self._roster.restored.pop(name, None)
        if layout_spec is not None:
            self._roster.apply_spec(name, layout_spec)

    async def launch_when_clear(self, name: str, *, initial: bool, force: bool = False) -> None:
        """Launch `name` once its stagger (`initial`: a start asked for) and its shared GPU's neighbours
        let it, its last tree is swept and the GPU memory check passes."""
        inst = self._roster.instances[name]
        try:
            if initial and inst.spec.start_stagger > 0:
                await self._clock.sleep(inst.spec.start_stagger)
            noted = False
            while blockers := self._blocked_by(name):
                if not noted:
                    self._notice(
                        name,
                        "info",
                        f"{name} waits for {', '.join(blockers)} to allocate its KV cache (shared GPU)",
                    )
                    noted = True
                await self._clock.sleep(self.poll_interval)
            await self._sweeper.settle(name)
            if not initial and not await self._port_ok(inst):  # a start asked for: preflight checked it
                return
            if not await self._gpu_memory_ok(inst, force=force):
                return
            await self._launch_now(inst)
        finally:
            self._roster.pending.pop(name, None)

    def _blocked_by(self, name: str) -> list[str]:
        """GPU neighbours this instance must wait for: still profiling memory, or queued before it."""
        roster = self._roster
        return self.gate.blocked_by(name, roster.instances, roster.pending, roster.layout.names())

    async def _port_ok(self, inst: Instance[ProcessHandle]) -> bool:
        """A policy relaunch (after a crash) finds its port free, as a start's preflight checked it: one
        taken meanwhile by another process goes BACKOFF -> FAILED with its holder named."""
        if not self.check_preflight or inst.state is not State.BACKOFF:
            return True
        taken = await asyncio.to_thread(port_problem, launch_spec(inst.spec, self._layout.session))
        if taken is None:
            return True
        self._notice(inst.spec.name, "error", taken)
        inst.refuse_restart(taken)
        return False

    async def _gpu_memory_ok(self, inst: Instance[ProcessHandle], *, force: bool) -> bool:
        """`preflight.gpu_memory_check` just before the launch (after the stagger, a shared GPU's
        neighbours and the sweep): the free memory the new process will find. A refusal of a start
        asked for is kept for `start` to raise; a policy restart refused goes BACKOFF -> FAILED."""
        name = inst.spec.name
        spec = launch_spec(inst.spec, self._layout.session)
        if not self.check_preflight or spec.engine == "router" or self.gate.cpu_only_vllm(spec):
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

    def _sample_gpus(self, spec: InstanceSpec) -> GpuSample:
        """The GPUs as the launch will find them, from the source the instance runs on
        (`core.gpu.GpuSources.for_instance`: the simulated box for a sim, else NVML / AMD SMI), each
        process named by its instance."""
        sample = self._gpus.for_instance(spec).sample()
        return attribute(sample, self._owners({p.pid for p in sample.processes}))

    def pids_of(self, name: str) -> set[int]:
        """The processes of `name` on this machine (an attached server: its listener's tree)."""
        inst = self.instances[name]
        if isinstance(inst, Attached):  # on this machine: its listener's tree (GPU memory per instance)
            return inst.local_pids(self._clock.time()) if inst.state is not State.UNREACHABLE else set()
        handle = inst.handle
        return set(self._launcher.tree(handle, thorough=False)) if handle is not None else set()

    async def _launch_now(self, inst: Instance[ProcessHandle]) -> None:
        """STARTING, then the blocking spawn (up to a few 100 ms: fork, exec, the pump's handshake) in a
        thread, so instances launched together never hold the event loop. A stop during the spawn
        (it cancels this task, then waits for it) still gets the process: it is attached and recorded
        before the cancellation goes on, and the stop path ends it like any other."""
        name = inst.spec.name
        inst.log_path = log_path_for(self._roster.session, name)
        self._tails.follow(name, inst.log_path)
        if not inst.begin_launch():
            return
        spec = launch_spec(inst.spec, self._layout.session, cpu_vllm=self.gate.cpu_only_vllm(inst.spec))
        intent = intent_record(inst, spec, self._roster.session, self._layout, self._clock)
        log_path = inst.log_path

        def spawn() -> ProcessHandle:
            self._records.store.save(
                intent
            )  # written ahead: a launcher killed mid-spawn leaves a findable trace
            return self._launcher.spawn(spec, log_path=log_path, session=self._roster.session)

        fut = asyncio.ensure_future(asyncio.to_thread(spawn))
        try:
            handle = await asyncio.shield(fut)
        except asyncio.CancelledError:
            while not fut.done():  # the spawn cannot be taken back: wait for its process
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(fut)
            if fut.exception() is None:
                inst.attach(fut.result())
                self._records.save_run(inst)
            else:
                self._records.remove(name)
                inst.spawn_failed(fut.exception())  # type: ignore[arg-type]
            raise
        except Exception as exc:  # noqa: BLE001 — SpawnError/OSError expected; any other is said, not raised
            if not isinstance(exc, (SpawnError, OSError)):
                self._notice(name, "error", f"{name}: spawn failed unexpectedly: {exc!r}")
            self._records.remove(name)
            inst.spawn_failed(exc)
            return
        inst.attach(handle)
        await asyncio.to_thread(self._records.save_run, inst)


def _joiner(batch: asyncio.Future[None]) -> Runner:
    """One queue's share of a batch start: done when the batch is (not cancelled with one queue)."""

    async def run(_op: Operation) -> None:
        await asyncio.shield(batch)

    return run
