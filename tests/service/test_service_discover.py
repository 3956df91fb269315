"""`vtui discover`: a `vtui sim` started by hand is found (process scan + its /metrics' `vllm:`
families), an instance a session launched is not (its VTUI_INSTANCE marker), and `--add` appends the
found one to the layout as an attached server — the file's text kept as it was, the result valid,
nothing added twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomli_w

from vtui.layouts import load_layout
from vtui.supervisor.discovery import kind_of, model_of

from .conftest import ps_rows, sim_instance, vtui

pytestmark = pytest.mark.timeout(180)


def test_command_lines_it_recognises() -> None:
    assert (
        kind_of(["/venv/bin/python", "/venv/bin/vllm", "serve", "Qwen/Qwen3-8B", "--port", "8001"]) == "vllm"
    )
    assert kind_of(["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]) == "vllm"
    assert (
        kind_of(["python", "-m", "vtui", "sim", "m"]) == kind_of(["python", "-m", "vtui.sim", "m"]) == "sim"
    )
    assert kind_of(["VLLM::EngineCore"]) is None and kind_of(["vllm", "bench", "serve"]) is None
    assert model_of(["vllm", "serve", "Qwen/Qwen3-8B", "--port", "1"]) == "Qwen/Qwen3-8B"
    assert model_of(["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "x/y"]) == "x/y"


def test_discover_finds_the_outside_sim_not_the_managed_one_and_adds_it(
    tmp_path: Path, session: str, outside_sim: int
) -> None:
    managed = sim_instance("a", gpus=(1,))  # the outside sim holds simulated GPU 0
    path = tmp_path / "layout.toml"
    original = "# my box\n" + tomli_w.dumps({"session": {"name": session}, "instance": [managed]})
    original += "# the end of my layout\n"
    path.write_text(original)
    up = vtui("up", str(path))
    assert up.returncode == 0, up.stdout + up.stderr

    found = vtui("discover", "--json")
    assert found.returncode == 0, found.stderr
    urls = {item["url"]: item for item in json.loads(found.stdout)}
    assert f"http://127.0.0.1:{outside_sim}" in urls
    assert urls[f"http://127.0.0.1:{outside_sim}"]["kind"] == "sim"
    assert not any(item["port"] == managed["port"] for item in urls.values())  # the session's own

    table = vtui("discover")
    assert f"http://127.0.0.1:{outside_sim}" in table.stdout and "--add LAYOUT" in table.stdout

    added = vtui("discover", "--add", str(path))
    assert added.returncode == 0, added.stdout + added.stderr
    text = path.read_text()
    assert text.startswith(original)  # appended: comments, order and values kept
    layout = load_layout(path)
    # ours, among any other unmanaged server running on this machine meanwhile (another test's, on the
    # other xdist worker): each is added once
    ext = [
        s for s in layout.instances if s.engine == "external" and s.url == f"http://127.0.0.1:{outside_sim}"
    ]
    assert len(ext) == 1
    assert ext[0].name == f"qwen3-0.6b-{outside_sim}" and ext[0].model == "Qwen/Qwen3-0.6B"

    again = vtui("discover", "--add", str(path))
    assert again.returncode == 0 and "nothing to add" in again.stdout
    assert path.read_text() == text

    up = vtui("up", str(path))  # the supervisor now watches it
    assert up.returncode == 0, up.stdout + up.stderr
    assert ps_rows(str(path))[ext[0].name]["state"] == "ready"
    missing = vtui("discover", "--add", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and "no such layout file" in missing.stderr
    assert vtui("down", str(path)).returncode == 0
