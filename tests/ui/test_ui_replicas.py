"""The fleet table with a replica group: a row per replica and one for the router, which is the group's
ALL row (sums, percentiles of the merged histograms, the slow replica named); the session's ALL row
counts each replica once."""

from __future__ import annotations

from pathlib import Path

import pytest

from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.supervisor.replicas import supervised
from vtui.telemetry.metrics import MetricsSample, Percentiles
from vtui.ui.store import Store
from vtui.ui.widgets.instance_table import FleetTable

ENTRY = InstanceSpec(name="chat", model="m", port=8100, replicas=2, router_port=9000, gpus=(0, 1))
SOLO = InstanceSpec(name="solo", model="m", port=8200, gpus=(2,))


def status(spec: InstanceSpec) -> InstanceStatus:
    return InstanceStatus(spec.name, spec, State.READY, None, 1, 0.0, 0, None, None, False, None, None)


def test_router_row_is_the_groups_all_row() -> None:
    layout = Layout(SessionSpec(name="s"), (ENTRY, SOLO))
    store = Store(layout)
    assert store.names() == ["chat-0", "chat-1", "chat-router", "solo"]  # no row for the entry itself
    store.apply_statuses([status(s) for s in supervised(layout, port_for_metrics=lambda: 1).instances])
    buckets = {"chat-0": (10.0, 10.0, 10.0), "chat-1": (0.0, 10.0, 10.0), "solo": (10.0, 10.0, 10.0)}
    p95 = {"chat-0": 0.095, "chat-1": 0.955, "solo": 0.095}
    for name, running in (("chat-0", 2.0), ("chat-1", 3.0), ("solo", 4.0)):
        store.add_sample(
            MetricsSample(
                instance=name,
                at=1.0,
                running=running,
                waiting=0.0,
                ttft=Percentiles(p50=0.05, p95=p95[name]),
                windowed={"ttft": ((0.1, 1.0), buckets[name])},
            )
        )
    table = FleetTable()
    table.set_names(store.names())
    table.update_from(store, 2.0)
    router = table._rows["chat-router"]
    assert router.state is State.READY and router.aggregate
    assert router.running == 5.0  # its replicas' sum
    assert router.ttft95 == pytest.approx(0.1 + 0.9 * 0.9)  # the merged histograms', not chat-1's 0.955
    assert (router.phase, router.phase_style) == ("chat-1 slow", "warn")  # 0.955 s vs a median of 0.525
    assert table._all is not None and table._all.running == 9.0  # replicas and solo, the router not again
    assert table._all.state_label == "4/4 up"
    assert table._rows["chat-0"].running == 2.0 and not table._rows["chat-0"].aggregate


def test_the_routers_own_series_show_in_its_pane_and_errors_in_its_row() -> None:
    """The router's sample (vllm-router's `vllm_router_*`, captured from 0.1.17): its pane line names
    each replica's share of what it handed out and its errors and retries; errors within the window
    take the group row's phase."""
    from vtui.telemetry.metrics import MetricsWindow, parse_metrics
    from vtui.ui.widgets.instance_rows import router_line

    entry = InstanceSpec(name="chat", model="m", port=18200, replicas=2, router_port=9000, gpus=(0, 1))
    layout = Layout(SessionSpec(name="s"), (entry,))
    store = Store(layout)
    store.apply_statuses([status(s) for s in supervised(layout, port_for_metrics=lambda: 1).instances])
    window = MetricsWindow()
    fixtures = Path(__file__).parents[1] / "telemetry" / "fixtures"
    fresh, later = ((fixtures / f"metrics_router_0.1.17{k}.txt").read_text() for k in ("_fresh", ""))
    store.add_sample(window.update(parse_metrics(fresh), 100.0, "chat-router"))
    line = router_line(store.views["chat-router"], store)
    assert line == "routed -- req/s, errors --/s, retries --/s, since start 0 req, 0 err, 0 retries"
    table = FleetTable()
    table.set_names(store.names())
    table.update_from(store, 101.0)
    assert table._rows["chat-router"].phase == "2/2 up"
    store.add_sample(window.update(parse_metrics(later), 110.0, "chat-router"))
    line = router_line(store.views["chat-router"], store)
    assert line == (
        "routed 1.6 req/s, chat-0 0.5 (28%), chat-1 1.3 (72%), errors 0.1/s, retries 0.1/s, "
        "since start 16 req, 1 err, 1 retries"
    )
    assert router_line(store.views["chat-0"], store) is None
    table.update_from(store, 111.0)
    assert (table._rows["chat-router"].phase, table._rows["chat-router"].phase_style) == ("err 0.1/s", "bad")


def test_a_replica_scaled_away_leaves_no_row() -> None:
    """`replicas` lowered: the supervisor stops the highest-numbered replica and lists it no more; its
    row goes. A replica still running that a snapshot leaves out (a host link's gap) keeps its row."""
    from dataclasses import replace

    layout = Layout(SessionSpec(name="s"), (ENTRY, SOLO))
    store = Store(layout)
    run = supervised(layout, port_for_metrics=lambda: 1).instances
    store.apply_statuses([status(s) for s in run])
    stopped = [replace(status(s), state=State.STOPPED) if s.name == "chat-1" else status(s) for s in run]
    store.apply_statuses(stopped)
    assert "chat-1" in store.views  # stopped, still listed
    store.apply_statuses([status(s) for s in run if s.name not in ("chat-1", "chat-0")])
    assert store.names() == ["chat-0", "chat-router", "solo"]  # chat-0 was READY when last seen: kept
    table = FleetTable()
    table.set_names(store.names())
    table.update_from(store, 2.0)
    assert set(table._rows) == {"chat-0", "chat-router", "solo"}


@pytest.mark.slow
async def test_the_dashboard_follows_replicas_changed_while_the_group_runs(tmp_path) -> None:
    """The dashboard as a client of the session supervisor: `replicas` raised in the layout file and
    handed over (POST /layout) gives NAME-2 a row once it starts; lowered, the row goes once the
    supervisor forgot it (the feed's snapshot no longer lists it)."""
    import asyncio
    import sys
    import time
    import uuid

    import tomli_w
    from _support.ports import port_run
    from _support.procs import kill_all, marked

    from vtui.service.client import ServiceClient
    from vtui.ui.app import make_app

    engine = Path(__file__).parents[1] / "core" / "fake_engine.py"
    session = f"t{uuid.uuid4().hex[:8]}"
    port = port_run(3)
    path = tmp_path / "layout.toml"

    def write(replicas: int) -> None:
        entry = {
            "name": "chat",
            "model": "fake",
            "port": port,
            "command": [sys.executable, str(engine)],
            "replicas": replicas,
        }
        path.write_text(tomli_w.dumps({"session": {"name": session}, "instance": [entry]}))

    def hand_over() -> None:
        ServiceClient(session).post("/layout", {"path": str(path)}, timeout=30.0)

    write(2)
    app = make_app(path, gpu_sampler=False)

    async def until(predicate, what: str) -> None:
        end = time.monotonic() + 30
        while not predicate():
            seen = {n: v.state.value for n, v in app.store.views.items()}
            assert time.monotonic() < end, f"timed out waiting for {what}: {seen}"
            await asyncio.sleep(0.05)

    try:
        async with app.run_test(size=(120, 30)):
            views = app.store.views
            await until(
                lambda: all(n in views and views[n].state is State.READY for n in ("chat-0", "chat-1")), "up"
            )
            write(3)
            await asyncio.to_thread(hand_over)
            await until(lambda: "chat-2" in views and views["chat-2"].state is State.READY, "chat-2")
            write(2)
            await asyncio.to_thread(hand_over)
            await until(lambda: "chat-2" not in views, "chat-2's row gone")
            assert list(views) == ["chat-0", "chat-1"]
            await app.supervisor.stop()
            await app.bridge.close()
    finally:
        kill_all(marked(session + "/"))


def test_a_snapshot_that_drops_an_instance_does_not_swallow_the_one_before() -> None:
    """Snapshots waiting in the App's queue give way to a newer one (Textual's `can_replace`), except
    to one that no longer lists an instance: the older carries its last state (a scaled-away replica's
    STOPPED), without which its row would stay STOPPING for ever."""
    import dataclasses

    from vtui.ui.messages import StatusesChanged

    run = supervised(Layout(SessionSpec(name="s"), (ENTRY,)), port_for_metrics=lambda: 1).instances
    ready = tuple(status(s) for s in run)
    stopped = tuple(
        dataclasses.replace(st, state=State.STOPPED) if st.name == "chat-1" else st for st in ready
    )
    gone = tuple(st for st in ready if st.name != "chat-1")
    assert StatusesChanged(ready).can_replace(StatusesChanged(stopped))  # same names: the newer wins
    assert not StatusesChanged(stopped).can_replace(StatusesChanged(gone))  # chat-1's STOPPED is kept
    assert StatusesChanged(gone).can_replace(StatusesChanged(ready))  # a name added: the newer has all
