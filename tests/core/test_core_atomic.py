"""Atomic saves: a save SIGKILLed before its rename leaves the old file whole and a temp file behind; the
next save of that file (or a start, through the run store) removes it — never another live save's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from vtui.core.atomic import LEGACY_STALE_AFTER, atomic_write_text, sweep_stale_temps
from vtui.core.runstate import RunStore

HANG_BEFORE_RENAME = textwrap.dedent("""
    import os, sys, time
    from vtui.core import atomic
    def hang(src, dst):
        print("writing", flush=True)
        time.sleep(600)
    atomic.os.replace = hang
    atomic.atomic_write_text(sys.argv[1], "new contents " * 10000)
""")


def interrupted_save(target: Path) -> None:
    """A save killed with SIGKILL after writing its temp file, before the rename."""
    child = subprocess.Popen(
        [sys.executable, "-c", HANG_BEFORE_RENAME, str(target)],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "writing"
    child.send_signal(signal.SIGKILL)
    child.wait()


def temps(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.tmp"))


def test_the_next_save_removes_what_an_interrupted_one_left(tmp_path: Path) -> None:
    target = tmp_path / "layout.toml"
    target.write_text("old")
    interrupted_save(target)
    assert target.read_text() == "old"  # the old file is whole
    left = temps(tmp_path)
    assert len(left) == 1 and left[0].stat().st_size > 100_000
    atomic_write_text(target, "newer")
    assert target.read_text() == "newer"
    assert temps(tmp_path) == []


def test_a_live_writers_temp_file_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        live = tmp_path / f".f.json.{sleeper.pid}-abc123.tmp"
        live.write_text("in progress")
        atomic_write_text(target, "x")
        assert live.exists()  # another process's save under way
    finally:
        sleeper.kill()
        sleeper.wait()
    atomic_write_text(target, "y")
    assert not live.exists()  # its writer is gone now


def test_old_style_names_and_other_files_temps(tmp_path: Path) -> None:
    legacy = tmp_path / ".f.json.k2j4h5_x.tmp"  # named by an older vtui: no pid
    legacy.write_text("x")
    fresh_legacy = tmp_path / ".f.json.zzz999.tmp"
    fresh_legacy.write_text("x")
    old = time.time() - LEGACY_STALE_AFTER - 5
    os.utime(legacy, (old, old))
    other = tmp_path / ".g.json.999999999-abc.tmp"  # another file's: a save of f leaves it
    other.write_text("x")
    atomic_write_text(tmp_path / "f.json", "{}")
    assert not legacy.exists() and fresh_legacy.exists() and other.exists()
    assert sweep_stale_temps(tmp_path) == [other]  # the folder sweep takes every stale one


def test_the_run_store_sweeps_its_folder_when_listing(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    stale = store.folder / ".s.a.json.999999999-abcdef.tmp"
    stale.write_text("{")
    assert store.all() == []
    assert not stale.exists()


def test_reading_a_layout_removes_what_a_killed_save_of_it_left(tmp_path: Path) -> None:
    """No save has to come first: the next command that reads the layout sweeps its temp files."""
    from vtui.layouts import load_layout

    target = tmp_path / "layout.toml"
    target.write_text('[[instance]]\nname = "a"\nmodel = "org/m"\nport = 8001\n')
    interrupted_save(target)
    other = tmp_path / ".other.toml.999999999-abc.tmp"  # another file's: left for its own reads
    other.write_text("x")
    assert len(temps(tmp_path)) == 2
    assert load_layout(target).instances[0].name == "a"
    assert temps(tmp_path) == [other]


def test_a_supervisors_start_sweeps_the_state_dir(tmp_path: Path) -> None:
    """What the session supervisor runs at its start: every folder of the state dir, a few levels deep."""
    from vtui.core.atomic import sweep_stale_temps_under

    deep = tmp_path / "runs" / "outcomes"
    deep.mkdir(parents=True)
    left = [folder / f".x.json.999999999-abc{i}.tmp" for i, folder in enumerate((tmp_path, deep))]
    too_deep = tmp_path / "a" / "b" / "c" / "d"
    too_deep.mkdir(parents=True)
    kept = too_deep / ".x.json.999999999-abc.tmp"
    for path in [*left, kept]:
        path.write_text("{")
    assert sorted(sweep_stale_temps_under(tmp_path)) == sorted(left)
    assert kept.exists()
