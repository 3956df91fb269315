"""A `vtui/` folder in the user's current directory (a clone, anything with an `__init__.py`) must not be
imported in place of the installed vtui by the processes vtui starts: the session supervisor, the sim
engine and its `VLLM::EngineCore` child, detached tunes (`vtui.core.selfrun.module_argv`). The decoy's
`__init__` writes a marker file and exits 3, so running it shows.

In this dev setup the installed vtui is the editable install of this checkout: a different directory
from the decoy, which is all the test needs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from vtui.core.selfrun import as_dash_m, module_argv
from vtui.sim.child import NAME

from .conftest import healthy, marked, ps_rows, sim_instance, supervisors, vtui, wait_for, write_layout

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def decoy(tmp_path: Path) -> Path:
    """A directory holding a `vtui` package that leaves `MARKER` and exits 3 when imported."""
    folder = tmp_path / "clone"
    (folder / "vtui").mkdir(parents=True)
    marker = folder / "MARKER"
    (folder / "vtui" / "__init__.py").write_text(
        f"import pathlib, sys\npathlib.Path({str(marker)!r}).write_text('decoy imported')\nsys.exit(3)\n"
    )
    return folder


def test_the_decoy_shadows_plain_dash_m(decoy: Path) -> None:
    """The control: `python -m vtui` in that folder runs the decoy (so the tests below can fail)."""
    done = subprocess.run(
        [sys.executable, "-m", "vtui", "--version"], cwd=decoy, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3 and (decoy / "MARKER").exists()


@pytest.mark.parametrize(
    ("module", "args", "env", "expect"),
    [
        ("vtui", ("--version",), {}, "vtui "),
        ("vtui", ("tune", "--help"), {}, "usage:"),
        ("vtui.service", ("--help",), {}, "usage:"),
        ("vtui.sim", ("--help",), {}, "usage:"),
        ("vtui.supervisor.routerproc", ("--help",), {}, "usage:"),
        ("vtui.sim.child", (), {"VTUI_SIM_CHILD_TEST": "exit"}, ""),  # exits at once, 0
    ],
)
def test_module_argv_runs_the_installed_vtui_from_a_decoy_cwd(
    decoy: Path, module: str, args: tuple[str, ...], env: dict[str, str], expect: str
) -> None:
    done = subprocess.run(
        module_argv(module, *args),
        cwd=decoy,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert expect in done.stdout
    assert not (decoy / "MARKER").exists()


def test_module_argv_keeps_cwd_pythonpath_and_argv_as_dash_m_does(decoy: Path, tmp_path: Path) -> None:
    """Only the cwd's entry leaves sys.path: the child's cwd, PYTHONPATH entries and argv are those of
    `python -m` (argv[0] the module's file)."""
    extra = tmp_path / "extra"
    extra.mkdir()
    probe = "import json, os, sys; print(json.dumps([os.getcwd(), sys.path, sys.argv]))"
    (extra / "probe_mod.py").write_text(probe + "\n")
    done = subprocess.run(
        module_argv("probe_mod", "a", "--b"),
        cwd=decoy,
        env={**os.environ, "PYTHONPATH": str(extra)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    cwd, path, argv = json.loads(done.stdout)
    assert cwd == str(decoy)
    assert path[0] == str(extra) and "" not in path and str(decoy) not in path
    assert argv == [str(extra / "probe_mod.py"), "a", "--b"]


def test_a_session_started_in_a_decoy_cwd_runs_the_installed_vtui(
    decoy: Path, tmp_path: Path, session: str
) -> None:
    """`vtui up` typed in the clone's folder: the supervisor, the sim and its EngineCore child all run the
    installed vtui, in the user's cwd."""
    path = write_layout(tmp_path, session, [sim_instance("a", sim_engine_child=True)])
    console = Path(sys.executable).parent / "vtui"  # what a user types: the console script
    command = [str(console)] if console.exists() else module_argv("vtui")
    up = subprocess.run([*command, "up", str(path)], cwd=decoy, capture_output=True, text=True, timeout=90)
    assert up.returncode == 0, up.stdout + up.stderr
    row = ps_rows(str(path))["a"]
    assert row["state"] == "ready" and healthy(row["port"])
    assert not (decoy / "MARKER").exists()

    [supervisor] = supervisors(session)
    sim = psutil.Process(row["pid"])
    engine = wait_for(lambda: [c for c in sim.children() if c.cmdline()[:1] == [NAME]], what="EngineCore")
    for proc in (supervisor, sim, *engine):
        assert proc.cwd() == str(decoy)  # the user's cwd is kept, only its sys.path entry is not
    assert "vtui.service" in supervisor.cmdline() and "vtui.sim" in sim.cmdline()  # process scans match

    assert vtui("down", str(path)).returncode == 0
    assert not marked(session + "/")


def test_vtui_spawns_its_modules_only_through_module_argv() -> None:
    """No `[python, "-m", "vtui…"]` outside the helper: a new spawn would bring the shadowing back."""
    pattern = re.compile(r"""["']-m["']\s*,\s*["']vtui""")
    offenders = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "vtui").rglob("*.py"))
        if pattern.search(p.read_text())
    ]
    assert offenders == []


def test_as_dash_m_shows_the_bootstrap_as_the_module_it_runs() -> None:
    assert as_dash_m(module_argv("vtui.sim", "m", "--port", "1")) == [sys.executable, "-m", "vtui.sim"] + [
        "m",
        "--port",
        "1",
    ]
    assert as_dash_m(["vllm", "serve", "m"]) == ["vllm", "serve", "m"]
