"""The real app on the real Supervisor with real simulated-engine processes and real scrapes."""

from __future__ import annotations

import asyncio
import socket

import pytest

from vtui.core.state import State
from vtui.ui.app import make_app
from vtui.ui.textdump import screen_text

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _until(predicate, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)


async def test_sim_instance_ready_with_metrics_then_retune_and_stop(tmp_path):
    layout = tmp_path / "sim.toml"
    layout.write_text(f"""[session]
name = "sim"
gpu_memory_gib = 80

[[instance]]
name = "a"
engine = "sim"
model = "Qwen/Qwen3-8B"
port = {_free_port()}
gpus = [0]

[instance.flags]
max-num-seqs = 64
sim-startup-scale = 0
sim-load = 4
""")
    app = make_app(layout, gpu_sampler=False)
    async with app.run_test(size=(100, 30)) as pilot:
        view = app.store.views["a"]
        await _until(lambda: view.sample is not None and view.sample.generation_tps)
        text = screen_text(app)
        assert "READY" in text and "RUN/MAX" in text and "/64 " in text and "G tok/s" in text
        assert view.facts is not None and view.flag_history[-1].kv_tokens
        # Retune through the real supervisor: new flags, restart, new value on screen.
        app.control.restart_instance("a", view.spec.with_flags({"max-num-seqs": 32}))
        await _until(
            lambda: (
                view.state == State.READY
                and view.spec.flags["max-num-seqs"] == 32
                and view.sample is not None
            )
        )
        await pilot.pause()
        assert "/32" in screen_text(app)
        await pilot.press("q", "s")  # quit, stopping the instances
        await _until(lambda: not app.is_running, 20)
    assert app.supervisor.status()[0].state == State.STOPPED
