"""The real `vtui LAYOUT` in a real terminal (tmux): sim instances come up, keys work, quit stops them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
from _support.tmux import Tmux

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_vtui_in_tmux_against_the_sim(tmp_path):
    port = _free_port()
    layout = tmp_path / "tmux.toml"
    layout.write_text(f"""[session]
name = "tmux"
gpu_memory_gib = 80

[[instance]]
name = "simq"
engine = "sim"
model = "Qwen/Qwen3-8B"
port = {port}
gpus = [0]

[instance.flags]
max-num-seqs = 48
sim-startup-scale = 0
sim-load = 2
""")
    env = {
        k: os.environ[k]
        for k in ("VTUI_STATE_DIR", "VTUI_CONFIG_DIR", "XDG_CACHE_HOME", "PATH", "HOME")
        if k in os.environ
    }
    env.update(TERM="xterm-256color", COLUMNS="100", LINES="30")
    tmux = Tmux()
    cmd = " ".join([sys.executable, "-m", "vtui", str(layout)])
    try:
        tmux.run(
            "new-session",
            "-d",
            "-s",
            tmux.session,
            "-x",
            "100",
            "-y",
            "30",
            *[a for k, v in env.items() for a in ("-e", f"{k}={v}")],
            cmd,
        )
        tmux.run("set-option", "-s", "escape-time", "10")
        tmux.wait_for("READY", 40)
        tmux.wait_for("/48", 20)
        tmux.run("send-keys", "-t", tmux.session, "?")
        tmux.wait_for("instance.restart")
        tmux.run("send-keys", "-t", tmux.session, "Escape")
        tmux.wait_gone("instance.restart")  # else tmux merges Escape and the next key into Alt+key
        tmux.run("send-keys", "-t", tmux.session, "q")
        tmux.wait_for("leave instances running")
        tmux.run("send-keys", "-t", tmux.session, "s")
        end = time.monotonic() + 30
        while tmux.alive() and time.monotonic() < end:
            time.sleep(0.2)
        assert not tmux.alive(), "vtui did not exit"
        with socket.socket() as s:  # the instance was stopped: nothing listens on its port any more
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT of old scrapes is fine
            s.bind(("127.0.0.1", port))
            s.listen()
    finally:
        tmux.kill()
        # Whatever happened above, leave no instance behind (a failed run would otherwise keep serving).
        subprocess.run(
            [sys.executable, "-m", "vtui", "down", str(layout)],
            env={**os.environ, **env},
            capture_output=True,
            timeout=60,
        )


def test_a_twenty_key_burst_across_screen_changes_in_tmux(tmp_path):
    """One `send-keys` (one terminal write): save as (a dialog pushed), a path typed at once, enter (it
    closes), help opened and closed twice, enter (the detail screen): every key acts, in order."""
    port = _free_port()
    layout = tmp_path / "burst.toml"
    layout.write_text(f"""[session]
name = "burst"
gpu_memory_gib = 80

[[instance]]
name = "simb"
engine = "sim"
model = "Qwen/Qwen3-8B"
port = {port}
gpus = [0]

[instance.flags]
sim-startup-scale = 0
""")
    env = {
        k: os.environ[k]
        for k in ("VTUI_STATE_DIR", "VTUI_CONFIG_DIR", "XDG_CACHE_HOME", "PATH", "HOME")
        if k in os.environ
    }
    env.update(TERM="xterm-256color", COLUMNS="100", LINES="30")
    tmux = Tmux()
    cmd = " ".join([sys.executable, "-m", "vtui", str(layout)])
    try:
        tmux.run(
            "new-session",
            "-d",
            "-s",
            tmux.session,
            "-c",
            str(tmp_path),  # the relative path typed is saved here
            "-x",
            "100",
            "-y",
            "30",
            *[a for k, v in env.items() for a in ("-e", f"{k}={v}")],
            cmd,
        )
        tmux.run("set-option", "-s", "escape-time", "10")
        tmux.wait_for("READY", 40)
        keys = ["S", "C-u", *"layout1.toml", "Enter", "?", "?", "?", "?", "Enter"]
        assert len(keys) == 20
        tmux.keys(*keys)
        tmux.wait_for("Diagnosis", 20)  # the detail screen: help closed as often as it opened
        end = time.monotonic() + 10
        while not (tmp_path / "layout1.toml").exists() and time.monotonic() < end:
            time.sleep(0.1)
        assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".toml") == [
            "burst.toml",
            "layout1.toml",
        ]
        assert "instance.restart" not in tmux.screen()  # no help left open
    finally:
        tmux.kill()
        subprocess.run(
            [sys.executable, "-m", "vtui", "down", str(layout)],
            env={**os.environ, **env},
            capture_output=True,
            timeout=60,
        )
