"""A stand-in for OpenSSH's client, for tests and benchmarks of `vtui --host` on one machine (no sshd):

    VTUI_SSH="python -m vtui.testing.fake_ssh"  VTUI_FAKE_SSH_ROOT=/tmp/hosts

Each "host" is a folder `$VTUI_FAKE_SSH_ROOT/<host>` whose `state/` is that host's vtui state dir.
`fake_ssh [OPTIONS] [user@]HOST COMMAND…` runs COMMAND with `sh -c` and VTUI_STATE_DIR set to it, as
sshd would run it in the remote user's shell. `fake_ssh -N -L LOCAL:REMOTE HOST` relays each
connection to the Unix socket LOCAL to the Unix socket REMOTE, as OpenSSH's stream-local forwarding
does, until killed; its pid is written to `<host>/forwards/<pid>`. While `<host>/down` exists the host
is unreachable: a command or a new forward fails with ssh's own message and exit status 255, and a
running forward exits 255 within 0.2 s (a network lost mid-session). Stdlib only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

UNREACHABLE = 255  # ssh's exit status for a connection problem
WITH_VALUE = set("bcDEeFIiJLlmOopQRSWw")  # ssh's options that take a value


def _parse(argv: list[str]) -> tuple[dict[str, list[str]], list[str], str, list[str]]:
    """(options with values, flags, destination, command)."""
    options: dict[str, list[str]] = {}
    flags: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-") and len(argv[i]) > 1:
        arg = argv[i]
        letter = arg[1]
        if letter in WITH_VALUE:
            value = arg[2:] or argv[i + 1]
            i += 1 if arg[2:] else 2
            options.setdefault(letter, []).append(value)
        else:
            flags.extend(arg[1:])
            i += 1
    if i >= len(argv):
        raise SystemExit("usage: fake_ssh [options] destination [command]")
    return options, flags, argv[i], argv[i + 1 :]


def _host_dir(destination: str) -> Path:
    root = os.environ.get("VTUI_FAKE_SSH_ROOT")
    if not root:
        raise SystemExit("fake_ssh: VTUI_FAKE_SSH_ROOT is not set")
    host = destination.rsplit("@", 1)[-1]
    return Path(root) / host


def _unreachable(host: Path) -> bool:
    return (host / "down").exists()


async def _relay(local: str, remote: str, host: Path) -> int:
    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(remote)
        except OSError as exc:  # what ssh says when the remote socket is gone
            print(f"channel: open failed: connect failed: {exc.strerror}", file=sys.stderr, flush=True)
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    with contextlib.suppress(FileNotFoundError):
        os.unlink(local)
    try:
        server = await asyncio.start_unix_server(serve, path=local)
    except OSError as exc:
        print(f"unix_listener: cannot bind to path {local}: {exc.strerror}", file=sys.stderr, flush=True)
        print("Could not request local forwarding.", file=sys.stderr, flush=True)
        return UNREACHABLE
    os.chmod(local, 0o600)
    try:
        while not _unreachable(host):
            await asyncio.sleep(0.2)
        print("Connection to host closed by remote host.", file=sys.stderr, flush=True)
        return UNREACHABLE
    finally:
        server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(local)


def main(argv: list[str] | None = None) -> int:
    options, flags, destination, command = _parse(list(sys.argv[1:] if argv is None else argv))
    host = _host_dir(destination)
    if _unreachable(host):
        print(f"ssh: connect to host {host.name} port 22: Connection refused", file=sys.stderr)
        return UNREACHABLE
    signal.signal(signal.SIGTERM, _terminated)  # ssh ends on SIGTERM; the finally clauses run
    if "L" in options:
        local, remote = _split_forward(options["L"][0])
        forwards = host / "forwards"
        forwards.mkdir(parents=True, exist_ok=True)
        mark = forwards / str(os.getpid())
        mark.write_text(f"{local} {remote}\n")
        try:
            return asyncio.run(_relay(local, remote, host))
        except KeyboardInterrupt:
            return UNREACHABLE
        finally:
            mark.unlink(missing_ok=True)
    if "N" in flags or not command:
        print("fake_ssh: no command and no forward", file=sys.stderr)
        return 2
    state = host / "state"
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    env = {**os.environ, "VTUI_STATE_DIR": str(state)}
    return subprocess.call(["sh", "-c", " ".join(command)], env=env, stdin=subprocess.DEVNULL)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(UNREACHABLE)


def _split_forward(spec: str) -> tuple[str, str]:
    """`LOCAL.sock:REMOTE.sock` (Unix socket paths; a TCP port forward is not simulated)."""
    local, sep, remote = spec.partition(":")
    if not sep or not local.startswith("/") or not remote.startswith("/"):
        raise SystemExit(f"fake_ssh: only socket-to-socket forwards are simulated, not {spec!r}")
    return local, remote


if __name__ == "__main__":
    sys.exit(main())
