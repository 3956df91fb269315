"""vtui installed outside the clone: the simulated engine's child starts from any directory, and the built
wheel, installed into a fresh venv, runs the shipped demo layout by name from a folder outside the clone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
