"""The dashboard as a client of the session supervisor (the real app, headless, on sim instances): the
issue's two reproductions (a CLI restart with new flags while the dashboard is open; `vtui up` while it
is open), a second client's restart seen by the dashboard and the dashboard's by it, and a kill -9 of
the supervisor that the dashboard rides out (it re-attaches to the new one, same pids, facts kept)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from vtui.core.state import State
from vtui.layouts import load_layout
from vtui.service.remote import RemoteSupervisor
from vtui.ui.app import make_app

from .conftest import healthy, marked, ps_rows, sim_instance, supervisors, vtui, write_layout

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


async def until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def starts(events: list, name: str) -> list:
    return [
        e
        for e in events
        if getattr(e, "instance", None) == name and getattr(e, "new", None) is State.STARTING
    ]


async def test_cli_restart_with_new_flags_while_the_dashboard_is_open(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a", max_restarts=3)])
    app = make_app(path, gpu_sampler=False)
    async with app.run_test(size=(110, 32)):
        assert isinstance(app.supervisor, RemoteSupervisor)
        view = app.store.views["a"]
        await until(lambda: view.state == State.READY, what="a READY in the dashboard")
        events: list = []
        app.supervisor.subscribe(events.append)
        port = view.spec.port

        restart = await asyncio.to_thread(vtui, "restart", str(path), "a", "--set", "max-num-seqs=8")
        assert restart.returncode == 0, restart.stdout + restart.stderr
        await until(
            lambda: view.state == State.READY and view.spec.flags.get("max-num-seqs") == 8,
            what="the new flag READY in the dashboard",
        )
        await asyncio.sleep(1.5)  # time for a wrong relaunch with the old flags to show
        assert len(starts(events, "a")) == 1, events  # the CLI's restart, nothing else
        rows = ps_rows(str(path))
        assert rows["a"]["state"] == "ready" and rows["a"]["flags"]["max-num-seqs"] == 8
        assert rows["a"]["restarts"] == 0 and healthy(port)
        servers = [p for p in marked(f"{session}/a") if "logfile.py" not in " ".join(p.cmdline())]
        assert [p.pid for p in servers] == [rows["a"]["pid"]]  # one server on the port

        down = await asyncio.to_thread(vtui, "down", str(path))
        assert down.returncode == 0, down.stdout + down.stderr
        await until(lambda: view.state == State.STOPPED, what="STOPPED in the dashboard")
        assert not marked(session + "/")


async def test_vtui_up_while_the_dashboard_is_open_shows_ready(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a")])
    app = make_app(path, gpu_sampler=False, autostart=False)
    async with app.run_test(size=(110, 32)):
        view = app.store.views["a"]
        await until(lambda: app.supervisor.supervisor_pid is not None, what="the dashboard attached")
        assert view.state == State.STOPPED
        up = await asyncio.to_thread(vtui, "up", str(path))
        assert up.returncode == 0, up.stdout + up.stderr
        await until(lambda: view.state == State.READY, what="READY in the dashboard")
        assert app.supervisor.pids_of("a") == {ps_rows(str(path))["a"]["pid"]}
        await app.supervisor.stop()


async def test_a_second_client_and_the_dashboard_see_each_others_restarts(
    tmp_path: Path, session: str
) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a")])
    app = make_app(path, gpu_sampler=False)
    other = RemoteSupervisor(load_layout(path))
    async with app.run_test(size=(110, 32)):
        view = app.store.views["a"]
        await until(lambda: view.state == State.READY, what="READY in the dashboard")
        await other.adopt()
        heard: list = []
        other.subscribe(heard.append)
        loop = asyncio.get_running_loop()

        asked = loop.time()
        await other.restart("a", other.layout.instance("a").with_flags({"max-num-seqs": 5}))
        await until(lambda: view.spec.flags.get("max-num-seqs") == 5 and view.state == State.READY)
        app.control.restart_instance("a", view.spec.with_flags({"max-num-seqs": 6}))
        await until(lambda: starts(heard, "a") and other.status()[0].spec.flags.get("max-num-seqs") == 6)
        assert loop.time() - asked < 30
        await until(lambda: other.status()[0].state is State.READY)
        await other.stop()
    await other.close()


async def test_the_dashboard_rides_out_a_kill_9_of_the_supervisor(tmp_path: Path, session: str) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a", gpus=(0,)), sim_instance("b", gpus=(1,))])
    app = make_app(path, gpu_sampler=False)
    async with app.run_test(size=(110, 32)):
        views = app.store.views
        await until(lambda: all(views[n].state == State.READY for n in "ab"), what="both READY")
        await until(lambda: all(views[n].facts is not None for n in "ab"), what="startup facts")
        pids = {n: app.supervisor.status()[i].pid for i, n in enumerate("ab")}
        [old] = supervisors(session)
        old.kill()
        old.wait(5)
        # The feed ends; the client starts a new supervisor, which re-adopts both.
        await until(
            lambda: app.supervisor.supervisor_pid not in (None, old.pid),
            what="re-attached to a new supervisor",
        )
        await until(lambda: all(st.adopted for st in app.supervisor.status()), what="both adopted")
        assert {st.name: st.pid for st in app.supervisor.status()} == pids
        assert all(views[n].state == State.READY for n in "ab")
        assert all(views[n].facts is not None for n in "ab")
        assert all(healthy(st.spec.port) for st in app.supervisor.status())
        await app.supervisor.stop()
    assert not marked(session + "/")


async def test_a_dashboard_opened_on_running_instances_has_their_facts_and_history(
    tmp_path: Path, session: str
) -> None:
    path = write_layout(tmp_path, session, [sim_instance("a")])
    up = await asyncio.to_thread(vtui, "up", str(path))
    assert up.returncode == 0, up.stdout + up.stderr
    await asyncio.sleep(8.0)  # the supervisor scrapes meanwhile: several samples of history
    app = make_app(path, gpu_sampler=False, autostart=False)
    attached = time.monotonic()
    async with app.run_test(size=(110, 32)):
        view = app.store.views["a"]
        await until(lambda: view.state == State.READY, what="READY in the dashboard")
        await until(lambda: len(view.history) >= 3, timeout=10, what="the plot's history")
        # more samples than 1 Hz live samples since attaching could give: they came from the supervisor
        assert len(view.history) > time.monotonic() - attached + 1, (
            len(view.history),
            time.monotonic() - attached,
        )
        assert view.facts is not None and view.facts.kv_cache_tokens, view.facts
        assert any("KV cache" in line for line in app.supervisor.recent_lines("a"))
        await app.supervisor.stop()


async def test_the_dashboard_draws_the_supervisors_gpu_samples_and_runs_no_sampler(
    tmp_path: Path, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a supervisor that samples the GPUs (here: no driver, so the sims' simulated box), the
    dashboard draws the feed's samples, its process attributed to the instance, and runs no GPU sampler
    of its own (one sampler per session, not one per client); with one that samples none, it does."""
    monkeypatch.setenv("VTUI_SUPERVISOR_GPU", "1")
    path = write_layout(tmp_path, session, [sim_instance("a", gpus=(2,))])
    app = make_app(path)  # the default GPU sampler
    async with app.run_test(size=(110, 32)):
        view = app.store.views["a"]
        await until(lambda: view.state == State.READY, what="READY in the dashboard")
        await until(
            lambda: app.store.gpu is not None and any(p.instance == "a" for p in app.store.gpu.processes),
            what="the supervisor's GPU sample with a's process",
        )
        assert app.supervisor.feeds_gpu is True and app.bridge._gpu is None
        gpu = app.store.gpu
        assert gpu.available and gpu.gpus[2].memory_used and (gpu.gpus[2].name or "").startswith("SIM")
        await app.supervisor.stop()
    monkeypatch.setenv("VTUI_SUPERVISOR_GPU", "0")
    other = tmp_path / "other"
    other.mkdir()
    path = write_layout(other, session + "b", [sim_instance("b", gpus=(3,))])
    app = make_app(path, autostart=False)
    async with app.run_test(size=(110, 32)):
        await until(lambda: app.supervisor.feeds_gpu is not None, what="the dashboard attached")
        await until(lambda: app.bridge._gpu is not None, what="the dashboard's own GPU sampler")
        assert app.supervisor.feeds_gpu is False
