"""`vtui ps` stays cheap to start: its import path (the CLI, the ps command, the supervisor's client)
loads none of the heavy modules, which cost more than its request (http.client with email and ssl,
subprocess, psutil, the layout model, httpx)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "http.client",
    "email",
    "ssl",
    "subprocess",
    "psutil",
    "httpx",
    "vtui.core.model",
    "vtui.core.atomic",
)


def test_the_ps_path_imports_nothing_heavy() -> None:
    code = (
        "import json, sys; import vtui.cli, vtui.commands.ps, vtui.service.client; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert [m for m in HEAVY if m in loaded] == []


def test_a_found_supervisor_answers_a_command_in_one_request(monkeypatch) -> None:
    """find_supervisor's look is the full /status, which the command's Session then uses: `vtui ps`
    makes one request, not a look and a status (a refresh asks again)."""
    from vtui.commands._runs import Session
    from vtui.service import client as client_module

    asked: list[tuple[str, str]] = []

    def request(self, method, target, body=None, *, timeout=30.0):
        asked.append((method, target))
        return {"session": self.session, "instances": [{"name": "a"}]}

    monkeypatch.setattr(client_module.ServiceClient, "request", request)
    monkeypatch.setattr(
        client_module.locations, "registrations", lambda: [{"session": "s", "layout_path": "/l"}]
    )
    monkeypatch.setattr(client_module.locations, "same_file", lambda a, b: True)
    found = client_module.find_supervisor("/l")
    assert found is not None
    session = Session(found, [], None, False)
    assert session.instance_names() == ["a"] and session.status()["session"] == "s"
    assert asked == [("GET", "/status")]
    session.status(refresh=True)
    assert asked == [("GET", "/status"), ("GET", "/status")]
