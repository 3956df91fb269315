"""The one socket client (`vtui.service.client`) and the versioned, typed API: what a client says when it
meets a supervisor of another version, the statuses the handlers answer (400 bad input, 404 an unknown
route or instance, 409 another operation running, 500 with an id that is in the log), and `vtui
handover`, which replaces a supervisor without stopping its instances."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.refusals import OperationConflict
from vtui.service.api import API_HEADER, API_VERSION, VERSION_HEADER, VTUI_VERSION
from vtui.service.client import (
    RemoteError,
    ServiceClient,
    ServiceError,
    VersionMismatch,
    ensure_supervisor,
    handover,
    version_problem,
)
from vtui.service.handlers import Routes
from vtui.service.remote import RemoteSupervisor

from .conftest import sim_instance, vtui, write_layout


# -- versions ----------------------------------------------------------------------------------------
def test_versions_that_match_say_nothing_others_one_line_with_the_handover() -> None:
    assert version_problem("s", API_VERSION, VTUI_VERSION) == (None, False)
    line, refused = version_problem("s", API_VERSION, "0.0.1")
    assert not refused and line is not None and "vtui 0.0.1" in line and "`vtui handover s`" in line
    line, refused = version_problem("s", 0, None)
    assert refused and line is not None and "\n" not in line
    assert "before versioned APIs (API 0)" in line and f"API {API_VERSION}" in line
    line, _ = version_problem("s", API_VERSION + 1, "9.0", host="me@gpu2")
    assert line is not None and "`ssh me@gpu2 vtui handover s`" in line


class StandIn:
    """A supervisor's socket that answers every request with one canned answer (its versions as given:
    None leaves the header out, as a supervisor from before versioned APIs)."""

    def __init__(self, folder: Path, status: int, body: dict[str, Any], api: str | None, version: str | None):
        self.path = folder / "s.sock"
        self.asked: list[bytes] = []
        head = [f"HTTP/1.1 {status} X", "content-type: application/json", "connection: close"]
        head += [f"{API_HEADER}: {api}"] if api is not None else []
        head += [f"{VERSION_HEADER}: {version}"] if version is not None else []
        data = json.dumps(body).encode()
        self.answer = ("\r\n".join([*head, f"content-length: {len(data)}"]) + "\r\n\r\n").encode() + data
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(self.path))
        self.server.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                self.asked.append(data)
                conn.sendall(self.answer)


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[Any]:
    made: list[StandIn] = []

    def make(
        status: int = 200,
        body: dict[str, Any] | None = None,
        api: Any = API_VERSION,
        version: Any = VTUI_VERSION,
    ):
        made.append(
            StandIn(tmp_path, status, body or {"ok": True}, None if api is None else str(api), version)
        )
        return made[-1]

    yield make
    for server in made:
        server.server.close()


def test_the_cli_refuses_another_api_in_one_line(stand_in: Any) -> None:
    old = stand_in(api=None, version=None)  # a supervisor from before versioned APIs
    client = ServiceClient("s", socket_file=old.path)
    with pytest.raises(VersionMismatch) as caught:
        client.get("/status")
    assert "`vtui handover s`" in str(caught.value) and "\n" not in str(caught.value)
    assert client.alive()  # it answers: nobody starts a second supervisor beside it
    assert f"{API_HEADER}: {API_VERSION}".encode() in old.asked[0]  # the request named its API
    assert ServiceClient("s", socket_file=old.path, check_version=False).get("/status") == {"ok": True}


def test_another_vtui_of_the_same_api_is_said_once_and_served(stand_in: Any, capsys: Any) -> None:
    other = stand_in(version="0.0.7")
    client = ServiceClient("s", socket_file=other.path)
    assert client.get("/status") == {"ok": True} and client.get("/status") == {"ok": True}
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "vtui 0.0.7" in said[0] and "`vtui handover s`" in said[0]


def test_a_500_names_its_id_and_the_log(stand_in: Any) -> None:
    bug = stand_in(500, {"error": "internal error ab12cd34: KeyError('x')", "error_id": "ab12cd34"})
    with pytest.raises(ServiceError) as caught:
        ServiceClient("s", socket_file=bug.path).post("/start", {})
    assert caught.value.status == 500 and caught.value.error_id == "ab12cd34"
    assert "s.supervisor.log, error ab12cd34" in str(caught.value)


async def test_the_dashboard_refuses_another_api_with_the_same_line(tmp_path: Path) -> None:
    path = tmp_path / "feed.sock"

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        hello = json.dumps({"type": "hello", "supervisor_pid": 1, "instances": []}).encode() + b"\n"
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(f"{len(hello):x}\r\n".encode() + hello + b"\r\n")
        await writer.drain()
        await reader.read()  # held open, as a feed is

    server = await asyncio.start_unix_server(serve, path=str(path))
    client = RemoteSupervisor(
        Layout(SessionSpec("old"), (InstanceSpec("a", "m", 8000, engine="sim"),)),
        socket_file=path,
        start_on_demand=False,
        host="me@gpu2",
    )
    try:
        with pytest.raises(RemoteError, match="`ssh me@gpu2 vtui handover old`"):
            await client.adopt()
        with pytest.raises(RemoteError, match="API 0"):
            await client.start(["a"])  # nothing is asked of it
    finally:
        await client.close()
        server.close()


# -- typed errors: the handlers ------------------------------------------------------------------------
class _Supervisor:
    def __init__(self, raises: BaseException) -> None:
        self.instances = {"a": object()}
        self.layout = Layout(SessionSpec("s"), (InstanceSpec("a", "m", 8000, engine="sim"),))
        self.raises = raises

    async def sleep(self, name: str, level: int) -> None:
        raise self.raises


def _handlers(raises: BaseException) -> Routes:
    return Routes(SimpleNamespace(supervisor=_Supervisor(raises), session="s"))  # type: ignore[arg-type]


async def test_statuses_400_404_409_500(capsys: Any) -> None:
    conflict = _handlers(OperationConflict("a: restart running: sleep refused (try again after them)"))
    status, answer = await conflict.handle("POST", "/sleep", {"name": "a"})
    assert status == 409 and "restart running" in answer["error"]
    assert (await conflict.handle("POST", "/sleep", {"name": "b"}))[0] == 404  # an unknown instance
    assert (await conflict.handle("POST", "/stop", {"names": ["a", "zz"]}))[0] == 404
    assert (await conflict.handle("GET", "/nowhere", {}))[0] == 404  # an unknown route
    assert (await conflict.handle("POST", "/sleep", {"name": 3}))[0] == 400
    assert (await conflict.handle("GET", "/sleep", {}))[0] == 405

    bug = _handlers(KeyError("no such thing"))  # a KeyError of ours is a bug, not an unknown instance
    status, answer = await bug.handle("POST", "/sleep", {"name": "a"})
    logged = capsys.readouterr().err
    assert status == 500 and answer["error_id"] in answer["error"]
    assert f"error {answer['error_id']}: POST /sleep" in logged and "Traceback" in logged


async def test_a_request_of_another_api_is_refused_unless_it_looks_or_hands_over() -> None:
    handlers = _handlers(OperationConflict("a: restart running"))
    status, answer = await handlers.handle("POST", "/sleep", {"name": "a"}, api=API_VERSION + 1)
    assert status == 400 and "vtui handover s" in answer["error"]
    assert (await handlers.handle("POST", "/sleep", {"name": "a"}, api=API_VERSION))[0] == 409


# -- handover: a new supervisor, the same instances ------------------------------------------------------
def test_handover_replaces_the_supervisor_and_keeps_the_instances(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a")])
    client, _ = ensure_supervisor(session, path)
    client.post("/start", {"names": ["a"]}, timeout=60)
    client.post("/wait", {"names": ["a"], "timeout": 60}, timeout=70)
    before = client.get("/status")
    old, new = handover(session)
    after = new.get("/status")
    assert old["supervisor_pid"] == before["supervisor_pid"] != after["supervisor_pid"]
    assert (after["api_version"], after["vtui_version"]) == (API_VERSION, VTUI_VERSION)
    a = {i["name"]: i for i in after["instances"]}["a"]
    assert a["pid"] == before["instances"][0]["pid"] and a["adopted"]
    new.post("/wait", {"names": ["a"], "timeout": 30}, timeout=40)
    assert {i["name"]: i for i in new.get("/status")["instances"]}["a"]["state"] == "ready"

    done = vtui("handover", session)  # the command: the same, said in lines
    assert done.returncode == 0, done.stderr
    assert "replaced by" in done.stdout and "a: ready (re-adopted)" in done.stdout
    ServiceClient(session).post("/stop", {"names": ["a"]}, timeout=60)
    ServiceClient(session).post("/shutdown", {})


def test_every_route_of_the_table_has_its_handler() -> None:
    from vtui.service.schema import ROUTES

    missing = [
        f"{m} {p}: {r.handler}"
        for (m, p), r in ROUTES.items()
        if not callable(getattr(Routes, r.handler, None))
    ]
    assert ROUTES and missing == []


def test_a_big_supervisor_log_moves_aside_when_the_next_supervisor_starts(
    tmp_path: Path, session: str
) -> None:
    from vtui.service import locations
    from vtui.service.client import LOG_KEEP_BYTES

    path = write_layout(tmp_path, session, [sim_instance("a")])
    log = locations.log_path(session)
    log.write_bytes(b"an old line\n" * (LOG_KEEP_BYTES // 12 + 1))
    client, started = ensure_supervisor(session, path)
    assert started
    client.post("/shutdown", {})
    assert log.with_name(log.name + ".1").read_bytes().startswith(b"an old line")
    assert b"an old line" not in log.read_bytes() and b"supervising session" in log.read_bytes()
