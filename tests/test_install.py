"""vtui installed outside the clone: the simulated engine's child starts from any directory, and the built
wheel, installed into a fresh venv, runs the shipped demo layout by name from a folder outside the clone."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import textwrap
import time
import urllib.request
import zipfile
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_sim_engine_child_starts_outside_the_clone(tmp_path: Path) -> None:
    """The `VLLM::EngineCore` child runs under another argv[0], so it starts as the base Python: it must be
    told where vtui is (before the fix: `No module named 'vtui'` unless run from the clone's root)."""
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})  # vtui found the way an installed copy is, not through the cwd
        from vtui.sim.child import spawn
        proc = spawn()
        time.sleep(0.3)
        print("alive" if proc.poll() is None else f"exited {{proc.returncode}}")
        proc.terminate()
        proc.wait(5)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
    )
    assert out.stdout.strip() == "alive", out.stderr


# -- the built wheel, installed outside the clone -------------------------------------------------------

TEST_HOME = Path(os.environ.get("VTUI_TEST_HOME", str(Path.home() / ".cache" / "vtui-test")))
DEMO_PORTS = (8001, 8002, 8003, 8004)  # the shipped demo's
_CAN_BUILD = (
    "import importlib.util, sys, setuptools; "
    "v = tuple(int(x) for x in setuptools.__version__.split('.')[:2]); "
    "sys.exit(0 if v >= (70, 1) or importlib.util.find_spec('wheel') else 1)"
)


def _wheel_builder() -> str | None:
    """A Python whose setuptools can build a wheel offline (bdist_wheel: setuptools >= 70.1 or `wheel`):
    $VTUI_BUILD_PYTHON, this one, or the real-vLLM test environment's."""
    vllm = os.environ.get("VTUI_VLLM")
    candidates = [
        os.environ.get("VTUI_BUILD_PYTHON"),
        sys.executable,
        str(Path(vllm).with_name("python")) if vllm else None,
        str(TEST_HOME / "venv" / "bin" / "python"),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            if subprocess.run([candidate, "-c", _CAN_BUILD], capture_output=True, timeout=30).returncode == 0:
                return candidate
    return None


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is free
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _copy_tree(folder: Path) -> Path:
    """The project's files (tracked and new, not ignored) copied out, so the build writes nothing here."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return folder


def _run(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_the_wheel_runs_the_demo_by_name_outside_the_clone(tmp_path: Path) -> None:
    builder = _wheel_builder()
    if builder is None:
        pytest.skip("no Python with a wheel-capable setuptools (set VTUI_BUILD_PYTHON)")
    if not all(_port_free(p) for p in DEMO_PORTS):
        pytest.skip(f"the demo's ports {DEMO_PORTS} are in use")
    source = _copy_tree(tmp_path / "src")
    wheels = tmp_path / "wheels"
    built = _run(
        [builder, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-w", str(wheels)],
        cwd=tmp_path,
        env=dict(os.environ),
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = wheels.glob("vtui-*.whl")
    shipped = {f"vtui/layouts/builtin/{f.name}": f.read_bytes() for f in (ROOT / "layouts").glob("*.toml")}
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        packaged = {n: archive.read(n) for n in names if n.startswith("vtui/layouts/builtin/")}
    assert len(shipped) == 4 and packaged == shipped  # built from the one layouts/ folder, every file
    assert {"vtui/ui/vtui.tcss", "vtui/core/vllm_serve_flags.json"} <= names
    assert not any(n.startswith(("tests/", "layouts/")) for n in names)

    # A fresh venv; vtui from the wheel only, its dependencies from this interpreter's site-packages (a
    # .pth path entry: offline, and an editable vtui there is not activated by it).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VTUI_STATE_DIR", "VTUI_CONFIG_DIR")
    }
    env.update(
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    installed = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        cwd=tmp_path,
        env=env,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path, env
    )
    deps = sysconfig.get_paths()["purelib"]
    Path(purelib.stdout.strip(), "_vtui_test_deps.pth").write_text(deps + "\n", encoding="utf-8")

    elsewhere = tmp_path / "elsewhere"  # outside the clone, no layouts/ here
    elsewhere.mkdir()
    where = _run([str(python), "-c", "import vtui; print(vtui.__file__)"], elsewhere, env)
    assert where.stdout.strip().startswith(str(venv)), where.stdout + where.stderr
    vtui = str(venv / "bin" / "vtui")
    try:
        up = _run([vtui, "up", "demo", "--timeout", "90"], elsewhere, env, timeout=150)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert up.stdout.count(": ready on http://127.0.0.1:") == 4, up.stdout
        ps = _run([vtui, "ps", "--json"], elsewhere, env)  # no layout named: the last session's, the demo
        assert ps.returncode == 0, ps.stderr
        assert [row["state"] for row in json.loads(ps.stdout)] == ["ready"] * 4
    finally:
        down = _run([vtui, "down"], elsewhere, env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "session demo: 4 instance(s) down" in down.stdout

    # `vtui sim … --sim-engine-child` of the installed copy, from outside the clone
    port = _free_port()
    sim = subprocess.Popen(
        [
            vtui,
            "sim",
            "Qwen/Qwen3-0.6B",
            "--port",
            str(port),
            "--sim-startup-scale",
            "0",
            "--sim-engine-child",
        ],
        cwd=elsewhere,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        healthy = False
        while time.monotonic() < deadline and sim.poll() is None and not healthy:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                    healthy = resp.status == 200
            except OSError:
                time.sleep(0.2)
        assert healthy, sim.stderr.read().decode()[-2000:] if sim.poll() is not None else "no /health 200"
        children = psutil.Process(sim.pid).children()
        assert [c.name() for c in children] == ["VLLM::EngineCore"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sim.pid, signal.SIGKILL)
        sim.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
