"""The UI talks to the supervisor through `SupervisorApi` only; the fake the UI tests drive satisfies it."""

from __future__ import annotations

from vtui.core.api import SupervisorApi
from vtui.testing.fake_supervisor import FakeSupervisor


def test_the_fake_supervisor_satisfies_the_seam(layout):
    """(The session supervisor's client and the Supervisor it runs: tests/service/test_service_wire.py.)"""
    fake = FakeSupervisor(layout)
    assert isinstance(fake, SupervisorApi)
    fake.emit_logs("qwen", ["a", "b"])
    assert fake.recent_lines("qwen") == ["a", "b"] and fake.recent_lines("llama") == []


def test_the_ui_never_reaches_the_supervisor_through_hasattr_or_any():
    """No `supervisor: Any`, no `hasattr(...)` probing in the UI package (typed seams instead)."""
    import re
    from pathlib import Path

    import vtui.ui

    offenders = []
    for path in Path(vtui.ui.__file__).parent.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if re.search(r"\bhasattr\(|supervisor: Any|getattr\(problem", text):
            offenders.append(path.name)
    assert offenders == []


class _DyingSupervisor(FakeSupervisor):
    async def run(self) -> None:
        raise RuntimeError("lost the session socket")


async def test_a_failed_supervisor_worker_is_shown_not_swallowed(layout, app_factory):
    from vtui.ui.textdump import screen_text

    app = app_factory(_DyingSupervisor(layout))
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(4):
            await pilot.pause()
        assert app.store.supervisor_error == "RuntimeError: lost the session socket"
        text = screen_text(app)
        assert "SUPERVISOR FAILED" in text and "last known: 3 ready" in text
        assert "The supervisor stopped: RuntimeError: lost the session socket" in text


async def test_a_healthy_supervisor_shows_no_error(fake, app_factory):
    from vtui.ui.textdump import screen_text

    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(4):
            await pilot.pause()
        assert app.store.supervisor_error is None and "SUPERVISOR" not in screen_text(app)
