"""The OS seam: spawn an instance in its own session, tell whether it lives, stop it and everything it
started, probe /health.

vLLM's API server starts `VLLM::EngineCore` and `VLLM::Worker*` children that survive a SIGKILL of the
server (re-parented to PID 1, still holding memory). So each instance gets its own session (the log
pump of `supervisor.logfile` is the session leader, the API server its child), stop ends with SIGKILL to the
process group, and a sweep finds leftovers by session id and by the `VTUI_INSTANCE` marker in their
environment. A zombie counts as gone (PID 1 of a container may never reap it).

Every signal goes to a process proven the instance's own, never to a bare recorded number (pids, pgids
and sids are reused after a reboot or on a busy box): the leader by pid + create time, its live
descendants, processes carrying the instance's marker, and — only while the session is provably ours —
vLLM-titled processes of its session (vLLM's setproctitle wipes their environment). The group SIGKILL
goes out only while the group's leader (the log pump) is proven ours: our own unreaped child, or alive
with the marker. psutil re-checks each process's create time before it signals it.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

import httpx
import psutil

from vtui.core.instance import SpawnError
from vtui.core.model import InstanceSpec
from vtui.supervisor import drain, logfile
from vtui.supervisor.attached import Probe
from vtui.supervisor.drain import Router
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.health import HealthProbe

MARKER = "VTUI_INSTANCE"  # env var every process of an instance inherits: "<session>/<name>"
SPAWN_TIMEOUT = 10.0
# An unmarked vLLM-titled process of a session whose leader is gone counts as the instance's only if it
# started this soon after the API server (EngineCore and Workers start during startup).
TITLED_START_WINDOW = 1800.0


SLOW_LOOK_S = 1.0  # a drain's look this long is named in the stop's words


@dataclass(frozen=True)
class StopReport:
    graceful: bool  # every process left after SIGTERM within the grace period
    killed: tuple[int, ...]  # pids that needed SIGKILL (group or sweep)
    leftovers: tuple[int, ...]  # pids still alive at the end (should be empty)
    in_flight: int | None = None  # requests being served when the stop began (None: not asked/no answer)
    cut: int | None = None  # of those (and any that came after), still in flight at SIGTERM: cut short
    drained_s: float = 0.0  # seconds spent waiting for in-flight requests before the SIGTERM
    unanswered: bool = False  # asked how many were in flight, it never answered in time (too busy)
    # counted from vLLM's /metrics (running + waiting in its engine), not /load: a request the API server
    # holds before its engine has it (under a starved CPU, for seconds) is not in that count
    engine_count: bool = False
    slowest_look_s: float = 0.0  # the drain's longest look at the count (a slow one explains a long drain)

    def drain_text(self) -> str | None:
        """What the drain saw, when nothing was cut: None when it did not ask."""
        if self.cut_text() is not None or self.in_flight is None:
            return None
        if self.in_flight:
            return (
                f"{self.in_flight} request(s) in flight when the stop began, all ended within "
                f"{self.drained_s:g}s{self._slow_note()}"
            )
        if self.engine_count:
            return "no request running or waiting in vLLM's engine when the stop began"
        return "no request in flight when the stop began"

    def cut_text(self) -> str | None:
        """'N request(s) cut' for the stop event; what is unknown when the instance was too busy to say;
        None when none was cut."""
        if self.unanswered and self.cut is None:
            return (
                f"did not say how many requests were in flight (no answer to /metrics or /load within "
                f"{self.drained_s:g}s): any were cut"
            )
        if not self.cut:
            return None
        return f"{self.cut} request(s) still in flight after {self.drained_s:g}s were cut{self._slow_note()}"

    def _slow_note(self) -> str:
        """Why a drain outlasted its grace: the instance (or this machine) was slow to give the count."""
        if self.slowest_look_s < SLOW_LOOK_S:
            return ""
        return f" (one look at the count took {self.slowest_look_s:g}s)"


@runtime_checkable
class Launcher(Protocol):
    """The OS seam of supervision: what the supervisor needs from the OS (spawn, observe, stop, probe,
    find again). `OsLauncher` is the real one; tests pass doubles with the same methods. Blocking
    methods are short except `stop` (up to the grace period): callers on an event loop run them in a
    thread."""

    def spawn(self, spec: InstanceSpec, *, log_path: Path, session: str) -> ProcessHandle: ...

    def alive(self, handle: ProcessHandle) -> bool: ...

    def exit_code(self, handle: ProcessHandle) -> int | None: ...

    def tree(self, handle: ProcessHandle, thorough: bool = True) -> dict[int, psutil.Process]: ...

    def stop(self, handle: ProcessHandle, grace: float | None = None) -> StopReport: ...

    async def health(self, spec: InstanceSpec) -> bool: ...

    def health_sync(self, spec: InstanceSpec) -> bool: ...

    async def aclose(self) -> None: ...

    def find(
        self,
        *,
        pid: int,
        create_time: float,
        argv: tuple[str, ...] | list[str],
        key: str,
        log_path: Path,
        pump_pid: int | None = None,
    ) -> ProcessHandle | None: ...


def _serving(handle: ProcessHandle) -> bool:
    """Its leader lives and is not stopped (SIGSTOP: it answers nothing, so the drain need not wait)."""
    proc = _same_process(handle.pid, handle.create_time)
    try:
        return proc is not None and proc.status() != psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def _continue_stopped(procs: Iterable[psutil.Process]) -> None:
    """SIGCONT to the stopped (SIGSTOP, ^Z) among them, after the SIGTERM, as systemd does: a stopped
    process cannot act on its SIGTERM, and would sit out the whole grace period before the SIGKILL."""
    for proc in procs:
        try:
            if proc.status() == psutil.STATUS_STOPPED:
                proc.send_signal(signal.SIGCONT)
        except psutil.Error:
            pass


def exit_path_for(log_path: Path) -> Path:
    return log_path.with_name(log_path.name + ".exit")


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _same_process(pid: int, create_time: float) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > 0.01:
            return None  # the pid was recycled
        return proc if _alive(proc) else None
    except psutil.Error:
        return None


def _marker(proc: psutil.Process) -> str | None:
    try:
        marker: str | None = proc.environ().get(MARKER)
        return marker
    except psutil.Error:
        return None


def _started_within(proc: psutil.Process, when: float | None, window: float) -> bool:
    """Started no earlier than `when` (less a second of clock slack) and at most `window` s after it."""
    try:
        return not when or when - 1.0 <= proc.create_time() <= when + window
    except psutil.Error:
        return False


def settled_cmdline(proc: psutil.Process, tries: int = 20, pause: float = 0.005) -> list[str]:
    """The process's command line. One caught inside execve (its parent already resumed, as after a
    vfork) shows an empty one until the kernel has set up the new arguments: wait that out briefly."""
    for _ in range(tries):
        cmdline: list[str] = proc.cmdline()
        if cmdline:
            return cmdline
        time.sleep(pause)
    return []


def cmdline_matches(cmdline: list[str], argv: tuple[str, ...] | list[str]) -> bool:
    """The live command is the recorded one: same arguments (an interpreter may prefix a script's
    shebang), or a vLLM process that retitled itself."""
    if not cmdline:
        return False
    if cmdline[0].startswith("VLLM"):
        return True
    args = list(argv[1:])
    return (
        cmdline[-len(args) :] == args if args else os.path.basename(cmdline[0]) == os.path.basename(argv[0])
    )


class OsLauncher:
    """Spawns and stops real process trees. Blocking methods are short, except `stop` (up to the grace
    period plus a few seconds): the supervisor calls it through `asyncio.to_thread`."""

    def __init__(
        self,
        *,
        grace: float = 10.0,
        log_max_bytes: int = logfile.DEFAULT_MAX_BYTES,
        log_backups: int = logfile.DEFAULT_BACKUPS,
        health_timeout: float = 2.0,
        router: Router | None = None,
    ) -> None:
        self.grace = grace
        self.router = router  # told to route nothing new to an instance before it stops (supervisor.drain)
        self.log_max_bytes = log_max_bytes
        self.log_backups = log_backups
        self.health_timeout = health_timeout
        self.health_probe = HealthProbe(timeout=health_timeout)  # the one /health probe (supervisor.health)

    # -- spawn -----------------------------------------------------------------------------------
    def spawn(self, spec: InstanceSpec, *, log_path: Path, session: str) -> ProcessHandle:
        argv = spec.argv()
        env = spec.process_env()
        key = f"{session}/{spec.name}"
        env[MARKER] = key
        if shutil.which(argv[0], path=env.get("PATH")) is None:
            raise SpawnError(f"executable not found: {argv[0]}")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        exit_path = exit_path_for(log_path)
        exit_path.unlink(missing_ok=True)
        pump = [
            sys.executable,
            "-I",
            logfile.__file__,
            "--log",
            str(log_path),
            "--max-bytes",
            str(self.log_max_bytes),
            "--backups",
            str(self.log_backups),
            "--exit-file",
            str(exit_path),
            "--",
            *argv,
        ]
        popen = subprocess.Popen(
            pump,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        assert popen.stdout is not None
        try:
            ready, _, _ = select.select([popen.stdout], [], [], SPAWN_TIMEOUT)
            line = popen.stdout.readline().decode(errors="replace").strip() if ready else ""
        finally:
            popen.stdout.close()
        if not line.startswith("pid "):
            if popen.poll() is None:
                popen.kill()
            popen.wait()
            raise SpawnError(
                line[len("error ") :]
                if line.startswith("error ")
                else f"could not start {argv[0]} (log pump gave {line or 'nothing'})"
            )
        pid = int(line.split()[1])
        try:
            create_time = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:  # exited already; the exit file has its code
            create_time = 0.0
        handle = ProcessHandle(
            pid=pid,
            create_time=create_time,
            pgid=popen.pid,
            sid=popen.pid,
            key=key,
            log_path=log_path,
            argv=tuple(argv),
            pump_pid=popen.pid,
            exit_path=exit_path,
            popen=popen,
        )
        handle.serves(spec)
        return handle

    # -- observe ---------------------------------------------------------------------------------
    def alive(self, handle: ProcessHandle) -> bool:
        if handle.popen is not None:
            handle.popen.poll()  # reap the pump if it ended, so it does not linger as a zombie
        return _same_process(handle.pid, handle.create_time) is not None

    def exit_code(self, handle: ProcessHandle) -> int | None:
        """The leader's exit status as the pump recorded it, subprocess-style (negative: the signal that
        killed it); None: unknown or not yet written."""
        info = self.exit_info(handle)
        return info.returncode if info is not None else None

    def exit_info(self, handle: ProcessHandle) -> logfile.ExitInfo | None:
        """How the leader ended as the pump recorded it: exit code, or signal (and core dump), and the
        known killers running at that moment (supervisor.killers); None: unknown or not yet written."""
        return logfile.read_exit(handle.exit_path) if handle.exit_path is not None else None

    def tree(self, handle: ProcessHandle, thorough: bool = True) -> dict[int, psutil.Process]:
        """Every live process of the instance: the verified leader and its descendants, plus any
        process of its session or titled `VLLM…` that carries the instance's marker (an orphan keeps
        both after its parent died; the marker check keeps a recycled session id from matching).
        `thorough=False` (cheap, for NVML attribution each second): the leader and its descendants."""
        found: dict[int, psutil.Process] = {}
        leader = _same_process(handle.pid, handle.create_time)
        if leader is not None:
            found[leader.pid] = leader
            try:
                for child in leader.children(recursive=True):
                    found[child.pid] = child
            except psutil.Error:
                pass
        if not thorough:  # cheap (NVML attribution each second): the live tree only
            return {pid: p for pid, p in found.items() if _alive(p)}
        me = os.getpid()
        session_ours = self._leader_of(handle, handle.sid)
        for proc in psutil.process_iter(["name", "cmdline"]):
            if proc.pid in found or proc.pid == me:
                continue
            try:
                in_session = os.getsid(proc.pid) == handle.sid
            except OSError:
                continue
            name = proc.info.get("name") or ""
            cmd = proc.info.get("cmdline") or [""]
            titled = name.startswith("VLLM") or bool(cmd and cmd[0].startswith("VLLM"))
            if in_session or proc.pid == handle.pump_pid or titled:
                marker = _marker(proc)
                if marker == handle.key:
                    found[proc.pid] = proc
                elif (
                    marker is None
                    and in_session
                    and titled
                    and _started_within(proc, handle.create_time, TITLED_START_WINDOW)
                    and session_ours is not False
                ):
                    # vLLM's setproctitle wipes /proc/PID/environ of EngineCore and Workers, exactly the
                    # processes that outlive a killed API server: trust the session plus the title, while
                    # the session's leader is ours or gone (a live leader of a recycled sid is not ours).
                    found[proc.pid] = proc
        return {pid: p for pid, p in found.items() if _alive(p)}

    def _leader_of(self, handle: ProcessHandle, pid: int) -> bool | None:
        """Whether process `pid` (the session or group leader: the log pump) is the instance's: True
        (our own unreaped child, or alive with the marker), False (alive, someone else's), None (gone)."""
        if handle.popen is not None and handle.popen.pid == pid and handle.popen.poll() is None:
            return True
        proc = self._maybe(pid)
        if proc is None:
            return None
        return _marker(proc) == handle.key

    def _maybe(self, pid: int) -> psutil.Process | None:
        try:
            proc = psutil.Process(pid)
            return proc if _alive(proc) else None
        except psutil.Error:
            return None

    # -- stop ------------------------------------------------------------------------------------
    def stop(self, handle: ProcessHandle, grace: float | None = None) -> StopReport:
        """Drain (stop routing to it, wait up to `grace` for its in-flight requests: supervisor.drain), then
        SIGTERM to the leader, wait up to `grace` again, SIGKILL the group, sweep what is left; returns
        once no process of the instance is alive (or reports the leftovers after ~5 s of sweeping)."""
        grace = self.grace if grace is None else grace
        drained = None
        if handle.base_url and grace > 0 and _same_process(handle.pid, handle.create_time) is not None:
            drained = drain.drain(
                handle.base_url,
                grace,
                load_endpoint=handle.load_endpoint,
                key=handle.key,
                router=self.router,
                still_running=lambda: _serving(handle),
            )
        report = self._terminate(handle, grace)
        if drained is None:
            return report
        return replace(
            report,
            in_flight=drained.at_start,
            cut=drained.left,
            drained_s=drained.waited_s,
            unanswered=drained.unanswered,
            engine_count=not handle.load_endpoint,
            slowest_look_s=drained.slowest_look_s,
        )

    def _terminate(self, handle: ProcessHandle, grace: float) -> StopReport:
        procs = self.tree(handle)  # collected BEFORE killing: children lose their parent link after
        leader = _same_process(handle.pid, handle.create_time)
        # The leader shuts its children down itself; when it is already gone, orphans get TERM directly.
        targets = (
            [leader] if leader is not None else [p for pid, p in procs.items() if pid != handle.pump_pid]
        )
        for proc in targets:
            try:
                proc.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        _continue_stopped(p for pid, p in procs.items() if pid != handle.pump_pid)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not [p for pid, p in procs.items() if pid != handle.pump_pid and _alive(p)]:
                break
            time.sleep(0.05)
        survivors = {pid for pid, p in procs.items() if pid != handle.pump_pid and _alive(p)}
        pump = procs.get(handle.pump_pid) if handle.pump_pid else None
        if not survivors and pump is not None:  # let the pump write the last lines and exit itself
            end = time.monotonic() + 1.0
            while _alive(pump) and time.monotonic() < end:
                self._reap(handle)
                time.sleep(0.02)
        killed = set(survivors)
        if self._leader_of(handle, handle.pgid):  # the group is ours: SIGKILL it whole
            try:
                os.killpg(handle.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        sweep_deadline = time.monotonic() + 5.0
        while True:
            self._reap(handle)
            procs.update(self.tree(handle))
            live = {pid: p for pid, p in procs.items() if _alive(p)}
            if not live or time.monotonic() > sweep_deadline:
                break
            for pid, proc in live.items():
                if pid != handle.pump_pid:
                    killed.add(pid)
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            time.sleep(0.05)
        self._reap(handle)
        leftovers = tuple(sorted(pid for pid, p in procs.items() if _alive(p)))
        return StopReport(graceful=not survivors, killed=tuple(sorted(killed)), leftovers=leftovers)

    def _reap(self, handle: ProcessHandle) -> None:
        if handle.popen is not None:
            handle.popen.poll()

    # -- health ----------------------------------------------------------------------------------
    async def health(self, spec: InstanceSpec) -> bool:
        """GET /health answers 200 (`HealthProbe.healthy`: the one probe of any instance)."""
        return await self.health_probe.healthy(spec)

    async def probe(self, spec: InstanceSpec) -> Probe:
        """GET /health: its status, or why none came (an attached server's state follows it)."""
        return await self.health_probe.probe(spec)

    async def aclose(self) -> None:
        """Close the health probe's clients of the running loop (the supervisor's `close`)."""
        await self.health_probe.aclose()

    def health_sync(self, spec: InstanceSpec) -> bool:
        try:
            response = httpx.get(spec.health_url, timeout=self.health_timeout, trust_env=False, verify=False)
            return response.status_code == 200
        except (httpx.HTTPError, OSError):
            return False

    # -- adopt -----------------------------------------------------------------------------------
    def find(
        self,
        *,
        pid: int,
        create_time: float,
        argv: tuple[str, ...] | list[str],
        key: str,
        log_path: Path,
        pump_pid: int | None = None,
    ) -> ProcessHandle | None:
        """The recorded process if it is still that process (same create time, matching command)."""
        proc = _same_process(pid, create_time)
        if proc is None:
            return None
        try:
            if not cmdline_matches(settled_cmdline(proc), argv):
                return None
            pgid, sid = os.getpgid(pid), os.getsid(pid)
        except (psutil.Error, OSError):
            return None
        return ProcessHandle(
            pid=pid,
            create_time=create_time,
            pgid=pgid,
            sid=sid,
            key=key,
            log_path=log_path,
            argv=tuple(argv),
            pump_pid=pump_pid,
            exit_path=exit_path_for(log_path),
        )
