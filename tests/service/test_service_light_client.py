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
