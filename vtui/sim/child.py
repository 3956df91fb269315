"""The optional `VLLM::EngineCore` child process (--sim-engine-child): named like vLLM's engine process
(argv[0] and the kernel's comm), it holds the simulated GPU memory and, like vLLM's, outlives a SIGKILLed
parent (only a SIGTERM or a kill of its process group ends it)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

from vtui.core.selfrun import module_argv

NAME = "VLLM::EngineCore"


def child_env() -> dict[str, str]:
    """The environment of a child started as `python` under another argv[0] (the title): such a child
    cannot find its venv's pyvenv.cfg and starts as the base Python, so it is handed this process's
    sys.path, plus the folder vtui itself was imported from (an installed wheel, or a clone run from
    anywhere), as PYTHONPATH."""
    import vtui

    root = os.path.dirname(os.path.dirname(os.path.abspath(vtui.__file__)))
    entries = [p for p in sys.path if p]
    if root not in entries:
        entries.append(root)
    inherited = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*entries, *([inherited] if inherited else [])])}


def spawn() -> subprocess.Popen:
    """Start the child in the caller's process group (so killing the group kills it)."""
    proc = subprocess.Popen(
        module_argv("vtui.sim.child", program=NAME),
        executable=sys.executable,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        close_fds=True,
    )
    if proc.stdout is not None:  # wait for its ready handshake, as vLLM waits for the engine core
        proc.stdout.readline()
        proc.stdout.close()
    return proc


def _set_name(name: str) -> None:
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def main() -> int:
    _set_name(NAME)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    while True:  # an orphan keeps running (re-parented), as vLLM's engine core does
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main() if os.environ.get("VTUI_SIM_CHILD_TEST") != "exit" else 0)
