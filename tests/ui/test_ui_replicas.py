"""The fleet table with a replica group: a row per replica and one for the router, which is the group's
ALL row (sums, percentiles of the merged histograms, the slow replica named); the session's ALL row
counts each replica once."""

from __future__ import annotations

from dataclasses import replace as dataclasses_replace
from pathlib import Path

import pytest

from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.supervisor.replicas import supervised
from vtui.telemetry.metrics import MetricsSample, Percentiles
from vtui.ui.store import Store
from vtui.ui.widgets.fleet import FleetTable

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
    from vtui.ui.widgets.fleet_rows import router_line

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
async def test_the_in_process_dashboard_follows_replicas_changed_while_the_group_runs(tmp_path) -> None:
    """The dashboard supervising by itself: `replicas` raised gives NAME-2 a row once it starts, lowered
    takes the row away once the supervisor forgot it (its "scaled away" notice brings the snapshot)."""
    import asyncio
    import dataclasses
    import sys
    import time
    import uuid

    from _support.procs import kill_all, marked

    from vtui.supervisor.launcher import OsLauncher
    from vtui.supervisor.supervisor import Supervisor
    from vtui.ui.app import make_app

    engine = Path(__file__).parents[1] / "core" / "fake_engine.py"
    session = f"t{uuid.uuid4().hex[:8]}"
    from _support.ports import port_run

    port = port_run(3)
    entry = InstanceSpec("chat", "fake", port, command=(sys.executable, str(engine)), replicas=2)
    sup = Supervisor(Layout(SessionSpec(name=session), (entry,)), launcher=OsLauncher(grace=3))
    app = make_app(supervisor=sup, gpu_sampler=False, scraper=False)

    async def until(predicate, what: str) -> None:
        end = time.monotonic() + 20
        while not predicate():
            assert time.monotonic() < end, f"timed out waiting for {what}"
            await asyncio.sleep(0.05)

    try:
        async with app.run_test(size=(120, 30)):
            await until(
                lambda: all(app.store.views[n].state is State.READY for n in ("chat-0", "chat-1")), "up"
            )
            sup.set_layout(Layout(SessionSpec(name=session), (dataclasses.replace(entry, replicas=3),)))
            await until(
                lambda: "chat-2" in app.store.views and app.store.views["chat-2"].state is State.READY,
                "chat-2",
            )
            sup.set_layout(Layout(SessionSpec(name=session), (entry,)))
            await until(lambda: "chat-2" not in app.store.views, "chat-2's row gone")
            assert list(app.store.views) == ["chat-0", "chat-1"]
            await sup.stop()
    finally:
        kill_all(marked(session + "/"))


async def test_the_in_process_dashboard_scrapes_what_the_session_supervisor_scrapes() -> None:
    """The bridge's own scrape loops (no session supervisor) follow `supervisor.replicas.scrape_url`: the
    router on its Prometheus port, a sleeping server still, an attached server with its key."""
    import asyncio

    from vtui.testing.fake_supervisor import FakeSupervisor
    from vtui.ui.app import make_app

    attached = InstanceSpec("ext", "m", 8000, engine="external", url="http://10.0.0.9:8000", api_key="k3y")
    layout = Layout(SessionSpec(name="s"), (dataclasses_replace(ENTRY, engine="sim"), SOLO, attached))
    fake = FakeSupervisor(supervised(layout, port_for_metrics=lambda: 9555))
    asked: list[tuple[str, str, str | None]] = []

    class Loop:
        def __init__(self, name: str, url: str, on_sample, api_key: str | None) -> None:
            asked.append((name, url, api_key))

        async def run(self) -> None:
            await asyncio.Event().wait()

        def stop(self) -> None:
            asked.append(("stopped", "", None))

    app = make_app(supervisor=fake, gpu_sampler=False, scraper=Loop)
    async with app.run_test(size=(120, 30)) as pilot:
        for _ in range(10):
            await pilot.pause()
        found = {name: (url, key) for name, url, key in asked}
        assert found["chat-router"] == ("http://127.0.0.1:9555", None)  # vllm_router_*, not a replica's
        assert found["chat-0"] == ("http://127.0.0.1:8100", None)
        assert found["ext"] == ("http://10.0.0.9:8000", "k3y")
        await fake.sleep("solo")
        for _ in range(5):
            await pilot.pause()
        assert ("stopped", "", None) not in asked  # asleep: vLLM answers /metrics, still scraped
