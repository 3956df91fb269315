"""supervisor.notify: each event reaches the on_event command and the webhook once, the cooldown drops repeats
per (instance, kind), and a slow or failing command never blocks the caller. Webhook: a local server only.
Also the [session] keys in the layout schema."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vtui.layouts import LayoutError, load_layout
from vtui.layouts.dump import dump_layout
from vtui.supervisor.notify import EVENT_KINDS, Notifier, NotifyEvent


def _wait(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _recorder(tmp_path: Path) -> tuple[list[str], Path]:
    out = tmp_path / "events.jsonl"
    script = "import sys; open(sys.argv[1], 'a').write(sys.stdin.read() + '\\n')"
    return [sys.executable, "-c", script, str(out)], out


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_each_event_reaches_the_command_once(tmp_path):
    command, out = _recorder(tmp_path)
    n = Notifier(command, cooldown=60)
    for kind in EVENT_KINDS:
        assert n.notify(NotifyEvent(kind, "qwen", "demo", f"{kind}!", details={"signal": 15}))
    _wait(lambda: len(_lines(out)) == len(EVENT_KINDS))
    n.close()
    got = _lines(out)
    assert [e["event"] for e in got] == list(EVENT_KINDS)
    assert got[0] == {
        "event": "crashed",
        "instance": "qwen",
        "session": "demo",
        "message": "crashed!",
        "time": got[0]["time"],
        "details": {"signal": 15},
        "suppressed_since_last": 0,
    }


def test_cooldown_drops_repeats_per_instance_and_kind_and_counts_them(tmp_path):
    command, out = _recorder(tmp_path)
    now = [1000.0]
    n = Notifier(command, cooldown=60, clock=lambda: now[0])
    assert n.notify(NotifyEvent("crashed", "a", "s"))
    assert not n.notify(NotifyEvent("crashed", "a", "s"))  # a restart loop: dropped
    assert not n.notify(NotifyEvent("crashed", "a", "s"))
    assert n.notify(NotifyEvent("crashed", "b", "s"))  # another instance
    assert n.notify(NotifyEvent("recovered", "a", "s"))  # another kind
    now[0] += 61
    assert n.notify(NotifyEvent("crashed", "a", "s"))
    _wait(lambda: len(_lines(out)) == 4)
    n.close()
    got = [(e["event"], e["instance"], e["suppressed_since_last"]) for e in _lines(out)]
    assert got == [("crashed", "a", 0), ("crashed", "b", 0), ("recovered", "a", 0), ("crashed", "a", 2)]


def test_a_slow_or_failing_command_does_not_block_and_is_killed(tmp_path):
    logged: list[str] = []
    slow = Notifier([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5, log=logged.append)
    t0 = time.monotonic()
    for i in range(5):
        slow.notify(NotifyEvent("crashed", f"i{i}", "s"))
    assert time.monotonic() - t0 < 0.2  # queued, not run, on the caller's thread
    _wait(lambda: len(logged) >= 1, timeout=5)
    assert "still running after 0.5s: killed" in logged[0]
    slow.close(wait=0)
    failing = Notifier([sys.executable, "-c", "raise SystemExit(4)"], log=logged.append)
    failing.notify(NotifyEvent("failed", "x", "s"))
    _wait(lambda: any("exited with code 4" in line for line in logged))
    missing = Notifier(["/nonexistent/notify-me"], log=logged.append)
    missing.notify(NotifyEvent("failed", "x", "s"))
    _wait(lambda: any("cannot run on_event" in line for line in logged))
    failing.close()
    missing.close()


def test_webhook_posts_the_json_to_a_local_server(tmp_path):
    received: list[tuple[str, str, dict]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["content-length"]))
            received.append((self.path, self.headers["content-type"], json.loads(body)))
            self.send_response(204 if self.path == "/ok" else 500)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    logged: list[str] = []
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        n = Notifier(webhook=url + "/ok", log=logged.append)
        n.notify(NotifyEvent("asleep", "m", "s", details={"freed_gib": 70.5}))
        n.notify(NotifyEvent("woke", "m", "s"))
        _wait(lambda: len(received) == 2)
        n.close()
        assert received[0] == ("/ok", "application/json", received[0][2])
        assert [r[2]["event"] for r in received] == ["asleep", "woke"]
        assert received[0][2]["details"] == {"freed_gib": 70.5} and not logged
        bad = Notifier(webhook=url + "/broken", log=logged.append)
        bad.notify(NotifyEvent("failed", "m", "s"))
        _wait(lambda: bool(logged))
        assert "webhook" in logged[0] and "500" in logged[0]
        bad.close()
    finally:
        server.shutdown()


def test_unknown_kind_is_refused_and_nothing_configured_is_none():
    with pytest.raises(ValueError, match="unknown event kind"):
        NotifyEvent("exploded", "a", "s")
    from vtui.layouts import resolve_layout_arg

    assert Notifier.from_session(load_layout(resolve_layout_arg("demo")).session) is None


LAYOUT = """
[session]
name = "n"
on_event = ["notify-send", "vtui"]
webhook = "http://127.0.0.1:9000/hook"
on_event_cooldown = 5
[[instance]]
name = "a"
model = "Qwen/Qwen3-8B"
engine = "sim"
port = 8123
"""


def test_session_keys_load_round_trip_and_bad_values_are_named(tmp_path):
    path = tmp_path / "n.toml"
    path.write_text(LAYOUT)
    session = load_layout(path).session
    assert session.on_event == ("notify-send", "vtui")
    assert (session.webhook, session.on_event_cooldown) == ("http://127.0.0.1:9000/hook", 5.0)
    notifier = Notifier.from_session(session)
    assert notifier is not None and notifier.cooldown == 5.0 and notifier.command == ("notify-send", "vtui")
    notifier.close(wait=0)
    again = tmp_path / "again.toml"
    again.write_text(dump_layout(load_layout(path)))
    assert load_layout(again).session == session
    path.write_text(
        LAYOUT.replace('["notify-send", "vtui"]', '"notify-send"')
        .replace("http://127.0.0.1:9000/hook", "file:///etc/passwd")
        .replace("on_event_cooldown = 5", "on_event_cooldown = -1")
    )
    with pytest.raises(LayoutError) as err:
        load_layout(path)
    text = "\n".join(str(p) for p in err.value.problems)
    assert "session.on_event: expected a command as a non-empty list of strings" in text
    assert 'session.webhook: expected an http:// or https:// URL, got "file:///etc/passwd"' in text
    assert "session.on_event_cooldown: expected a number of seconds >= 0" in text
