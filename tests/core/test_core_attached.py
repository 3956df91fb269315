"""Attached servers (engine = "external"): the state machine on replayed probes, and the supervisor
watching one real HTTP server beside a launched instance — never launching, stopping or restarting it,
no policy acting on it, UNREACHABLE when its URL stops answering."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vtui.core.events import Notice, StateChanged
from vtui.core.model import InstanceSpec, Layout, RestartPolicy, SessionSpec
from vtui.core.state import State
from vtui.supervisor.attached import Attached, AttachedRefused, Probe
from vtui.supervisor.launcher import OsLauncher
from vtui.supervisor.preflight import preflight
from vtui.supervisor.supervisor import SleepRefused, Supervisor

from .conftest import fake_spec, free_port, marked, until

pytestmark = pytest.mark.timeout(60)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def time(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


def external(name: str = "gpu2", url: str = "http://127.0.0.1:9", **kw) -> InstanceSpec:
    host, port = url.rsplit("//", 1)[1].split(":")
    return InstanceSpec(name=name, model="", port=int(port), host=host, engine="external", url=url, **kw)


def attached(spec: InstanceSpec | None = None) -> tuple[Attached, list[StateChanged], FakeClock]:
    events: list = []
    clock = FakeClock()
    inst = Attached(spec or external(), clock=clock, emit=events.append, log_path=Path("/nonexistent"))
    return inst, events, clock


def test_states_follow_the_probes() -> None:
    inst, events, _ = attached()
    assert inst.state is State.STOPPED and not inst.settled
    inst.on_probe(Probe(None, "ConnectError: connection refused"))
    assert inst.state is State.UNREACHABLE and inst.settled
    assert "connection refused" in (inst.last_error or "")
    inst.on_probe(Probe(200))
    assert inst.state is State.READY and inst.last_error is None
    for _ in range(2):  # a busy server may miss a probe or two
        inst.on_probe(Probe(None, "no answer within 2 s"))
        assert inst.state is State.READY
    inst.on_probe(Probe(None, "no answer within 2 s"))
    assert inst.state is State.UNREACHABLE
    inst.on_probe(Probe(503))
    assert inst.state is State.UNHEALTHY and "answered 503" in (inst.last_error or "")
    inst.on_probe(Probe(200))
    assert [e.new for e in events if isinstance(e, StateChanged)] == [
        State.UNREACHABLE,
        State.READY,
        State.UNREACHABLE,
        State.UNHEALTHY,
        State.READY,
    ]
    assert events[-1].reason == "answers /health again"


def test_no_policy_ever_acts_on_it() -> None:
    policy = RestartPolicy("always", max_restarts=5, restart_unhealthy_after=1, restart_stuck_after=1)
    inst, _, clock = attached(external(restart=policy, sleep_mode=True, idle_sleep_after=1))
    inst.on_probe(Probe(200))
    inst.on_load(busy=True, progress=(1, 1))
    clock.t += 3600
    inst.on_load(busy=True, progress=(1, 1))  # stuck for an hour, by the numbers
    assert inst.policy_stop_due() is None and not inst.idle_sleep_due()
    for _ in range(3):
        inst.on_probe(Probe(500))
    clock.t += 3600
    assert inst.state is State.UNHEALTHY and inst.policy_stop_due() is None
    assert not inst.begin_launch() and inst.begin_stop() is None and inst.begin_policy_stop("x") is None
    assert not inst.restart_due() and not inst.start_overdue() and inst.restarts == 0


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def serve_health() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def test_supervisor_watches_it_and_never_touches_it(session_name: str) -> None:
    server = serve_health()
    port = server.server_address[1]
    dead = free_port()
    specs = (
        fake_spec("a"),
        external("gpu2", f"http://127.0.0.1:{port}"),
        external("gone", f"http://127.0.0.1:{dead}"),
    )
    lay = Layout(SessionSpec(name=session_name), specs)
    assert preflight(lay, cpu_count=64).problems == []  # its port is in use: it is the server's own
    sup = Supervisor(lay, launcher=OsLauncher(grace=3), health_interval=0.1, poll_interval=0.05)
    events: list = []
    sup.subscribe(events.append)
    try:
        await sup.start()
        states = await sup.wait_settled(timeout=10)
        assert states == {"a": State.READY, "gpu2": State.READY, "gone": State.UNREACHABLE}
        status = {st.name: st for st in sup.status()}
        assert status["gpu2"].pid is None and status["gpu2"].restarts == 0
        assert "connection refused" in (status["gone"].last_error or "")
        launched = [e.instance for e in events if isinstance(e, StateChanged) and e.new is State.STARTING]
        assert launched == ["a"]

        with pytest.raises(AttachedRefused, match="never starts, stops or restarts it"):
            await sup.restart("gpu2")
        with pytest.raises(SleepRefused, match="attached server"):
            await sup.sleep("gpu2")
        await sup.stop()
        assert sup.instances["a"].state is State.STOPPED and marked(session_name) == []
        assert sup.instances["gpu2"].state is State.READY  # still watched
        assert any(
            isinstance(e, Notice) and e.instance == "gpu2" and "left running" in e.text for e in events
        )

        server.shutdown()
        server.server_close()
        assert await until(lambda: sup.instances["gpu2"].state is State.UNREACHABLE)
    finally:
        await sup.close()
        server.server_close()


async def test_a_new_layout_turns_an_instance_into_an_attached_one(session_name: str) -> None:
    server = serve_health()
    port = server.server_address[1]
    lay = Layout(SessionSpec(name=session_name), (fake_spec("a"),))
    sup = Supervisor(lay, launcher=OsLauncher(grace=3), health_interval=0.1, poll_interval=0.05)
    try:
        sup.set_layout(Layout(SessionSpec(name=session_name), (external("a", f"http://127.0.0.1:{port}"),)))
        assert isinstance(sup.instances["a"], Attached)
        await sup.start()
        assert (await sup.wait_settled(timeout=10)) == {"a": State.READY}
    finally:
        await sup.close()
        server.shutdown()
        server.server_close()
