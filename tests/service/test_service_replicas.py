"""Replicas behind the real vllm-router (issue 17): `replicas = 2` of the sim start as two supervised
copies on their own ports and simulated GPUs plus a vllm-router on router_port; requests through the
router reach both (each replica's own request counter); a kill -9 of one leaves the router serving,
vtui restarts it, and the router's membership follows (removed, then added again); a new supervisor
adopts the group as it runs; a rolling restart of the group keeps the router serving; a replica's stop
leaves the router first; the group's name stops it all. Skipped only when vllm-router is not installed."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from _support.ports import port_run

from vtui.supervisor.replicas import router_installed
from vtui.telemetry.promtext import parse_metrics

from .conftest import SMALL_MODEL, ps_rows, supervisors, vtui, wait_for, write_layout

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def _router() -> None:
    """Skip without vllm-router, unless VTUI_REQUIRE_VLLM=1 (.ci/run, which installs it with [test])."""
    if not router_installed():
        why = "vllm-router is not installed (pip install 'vtui[router]')"
        if os.environ.get("VTUI_REQUIRE_VLLM") == "1":
            pytest.fail(f"{why}, and VTUI_REQUIRE_VLLM=1 requires it (the [test] extra installs it)")
        pytest.skip(why)


def group_entry(name: str, port: int, router_port: int) -> dict:
    return {
        "name": name,
        "engine": "sim",
        "model": SMALL_MODEL,
        "port": port,
        "replicas": 2,
        "router_port": router_port,
        "restart": "on-failure",
        "max_restarts": 3,
        "backoff": 0.2,
        "flags": {"max-model-len": 4096, "sim-startup-scale": 0.0},
    }


def served(port: int) -> float:
    """The replica's own count of finished requests (vllm:request_success_total, every reason)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5, trust_env=False).text
    return (
        parse_metrics(text, frozenset({"vllm:request_success_total"})).total("vllm:request_success_total")
        or 0.0
    )


def complete(router_port: int) -> int:
    body = {"model": SMALL_MODEL, "prompt": "hello", "max_tokens": 4}
    return httpx.post(
        f"http://127.0.0.1:{router_port}/v1/completions", json=body, timeout=30, trust_env=False
    ).status_code


def workers(router_port: int) -> set[str]:
    try:
        answer = httpx.get(f"http://127.0.0.1:{router_port}/list_workers", timeout=2, trust_env=False)
        return set(answer.json()["urls"])
    except (httpx.HTTPError, ValueError, KeyError):
        return set()


def test_two_sim_replicas_behind_vllm_router(tmp_path: Path, session: str) -> None:
    port = port_run(3)  # below the ephemeral range (_support.ports): the replicas', then the router's
    router_port = port + 2
    urls = {f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"}
    path = write_layout(tmp_path, session, [group_entry("chat", port, router_port)])
    up = vtui("up", str(path), timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr
    rows = ps_rows(str(path))
    assert set(rows) == {"chat-0", "chat-1", "chat-router"}
    assert [rows[n]["port"] for n in ("chat-0", "chat-1", "chat-router")] == [port, port + 1, router_port]
    assert rows["chat-0"]["gpus"] != rows["chat-1"]["gpus"]  # chosen by free memory: one GPU each
    assert {rows[n]["role"] for n in rows} == {"replica", "router"}
    assert all(r["state"] == "ready" for r in rows.values()), rows
    wait_for(lambda: workers(router_port) == urls, timeout=15, what="both replicas added to the router")
    wait_for(lambda: sorted(ps_rows(str(path))["chat-router"]["workers"]) == ["chat-0", "chat-1"], 10)

    # requests through the router reach both replicas (each counts its own)
    before = [served(port), served(port + 1)]
    assert [complete(router_port) for _ in range(8)] == [200] * 8
    after = [served(port), served(port + 1)]
    assert after[0] > before[0] and after[1] > before[1], (before, after)

    # kill -9 one replica: the router keeps serving, vtui restarts it, membership follows
    victim = rows["chat-0"]["pid"]
    seen: list[set[str]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(workers(router_port))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        os.kill(victim, signal.SIGKILL)
        codes = [complete(router_port) for _ in range(6)]  # while chat-0 is dead or restarting
        assert codes == [200] * 6, codes
        wait_for(
            lambda: (r := ps_rows(str(path))["chat-0"])["state"] == "ready" and r["pid"] != victim,
            timeout=60,
            what="chat-0 restarted",
        )
        wait_for(lambda: workers(router_port) == urls, timeout=15, what="chat-0 added back")
    finally:
        stop.set()
        watcher.join()
    seen.append(workers(router_port))  # the watcher may stop before its next look sees what wait_for saw
    gone = next((i for i, w in enumerate(seen) if f"http://127.0.0.1:{port}" not in w and w), None)
    assert gone is not None, "the router never dropped the dead replica"
    assert any(w == urls for w in seen[gone:]), "the restarted replica was not added back"
    row = ps_rows(str(path))["chat-0"]
    assert row["restarts"] == 1
    assert complete(router_port) == 200

    # kill -9 of the supervisor: the next one adopts the group as it runs (GPUs chosen by the last one)
    rows = ps_rows(str(path))
    (old,) = supervisors(session)
    old.kill()
    old.wait(10)
    again = ps_rows(str(path))
    assert again["chat-0"]["supervisor_pid"] != old.pid
    for name in rows:
        assert (again[name]["pid"], again[name]["gpus"], again[name]["adopted"]) == (
            rows[name]["pid"],
            rows[name]["gpus"],
            True,
        )
    wait_for(lambda: sorted(ps_rows(str(path))["chat-router"]["workers"]) == ["chat-0", "chat-1"], 15)

    # a rolling restart of the group: one replica at a time, the router serving throughout
    pids = {n: again[n]["pid"] for n in ("chat-0", "chat-1")}
    codes: list[int] = []
    stop.clear()

    def load() -> None:
        while not stop.is_set():
            codes.append(complete(router_port))

    loader = threading.Thread(target=load)
    loader.start()
    try:
        rolled = vtui("restart", str(path), "chat", timeout=120)
    finally:
        stop.set()
        loader.join()
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    after = ps_rows(str(path))
    assert all(after[n]["pid"] != pids[n] and after[n]["state"] == "ready" for n in pids), after
    assert after["chat-router"]["pid"] == rows["chat-router"]["pid"]  # the router itself stays
    assert codes and set(codes) == {200}, codes
    wait_for(lambda: workers(router_port) == urls, timeout=15, what="both replicas back in the router")

    # a replica's stop: the router forgets it first (the drain's hook), the group serves on
    stopped = vtui("down", str(path), "chat-1", timeout=60)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert workers(router_port) == {f"http://127.0.0.1:{port}"}
    assert complete(router_port) == 200

    down = vtui("down", str(path), "chat", timeout=60)  # the group's name: its replicas and router
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(ps_rows(str(path))[n]["pid"] for n in ("chat-0", "chat-1", "chat-router"))


async def test_the_dashboard_shows_each_replica_and_the_group_row(tmp_path: Path, session: str) -> None:
    """The real app on the session supervisor: a row per replica and the router's, which carries the
    group's load (its replicas' sum) while requests go through the router."""
    import asyncio

    from vtui.core.state import State
    from vtui.ui.app import make_app
    from vtui.ui.textdump import screen_text
    from vtui.ui.widgets.instance_table import FleetTable

    port = port_run(3)  # below the ephemeral range (_support.ports): the replicas', then the router's
    router_port = port + 2
    path = write_layout(tmp_path, session, [group_entry("chat", port, router_port)])
    up = await asyncio.to_thread(vtui, "up", str(path), timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr
    await asyncio.to_thread(
        wait_for, lambda: len(workers(router_port)) == 2, 15, "both replicas added to the router"
    )
    names = ("chat-0", "chat-1", "chat-router")
    stop = threading.Event()

    def traffic() -> None:
        body = {"model": SMALL_MODEL, "prompt": "hello", "max_tokens": 256}
        with httpx.Client(timeout=30, trust_env=False) as http:
            while not stop.is_set():
                http.post(f"http://127.0.0.1:{router_port}/v1/completions", json=body)

    loaders = [threading.Thread(target=traffic) for _ in range(6)]
    app = make_app(path, gpu_sampler=False)
    try:
        async with app.run_test(size=(160, 24)) as pilot:
            assert list(app.store.views)[:3] == list(names)  # the entry itself has no row
            for t in loaders:
                t.start()
            table = app.screen.query_one(FleetTable)

            def busy() -> bool:
                rows = table._rows
                return all(n in rows and rows[n].state is State.READY for n in names) and all(
                    rows[n].running for n in ("chat-0", "chat-1")
                )

            end = asyncio.get_running_loop().time() + 30
            while not busy():
                assert asyncio.get_running_loop().time() < end, "no load seen on both replicas"
                await pilot.pause(0.2)
            rows = table._rows
            group = rows["chat-router"]
            assert group.aggregate and group.phase in (
                "2/2 up",
                *(f"chat-{i} {kind}" for i in (0, 1) for kind in ("hot", "slow")),  # under load: either
            ), group.phase
            assert group.running == (rows["chat-0"].running or 0) + (rows["chat-1"].running or 0)
            text = screen_text(app)
            assert all(n in text for n in names), text

            # the router's own series (its Prometheus port, scraped by the supervisor): both replicas
            # are handed requests, and its pane says so
            def routed() -> dict[str, float]:
                sample = app.store.views["chat-router"].sample
                return dict(sample.routed) if sample is not None else {}

            def counted() -> bool:  # vllm-router counts a request in requests_total once it is answered
                sample = app.store.views["chat-router"].sample
                return sample is not None and sample.router.get("requests_total", 0) > 0

            end = asyncio.get_running_loop().time() + 15
            while not (len(routed()) == 2 and all(v > 0 for v in routed().values()) and counted()):
                assert asyncio.get_running_loop().time() < end, f"the router's series: {routed()}"
                await pilot.pause(0.2)
            assert set(routed()) == {f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"}
            sample = app.store.views["chat-router"].sample
            assert sample is not None and sample.router["requests_total"] > 0
            assert sample.router["active_workers"] == 2 and sample.router["errors_total"] == 0
            while table.selected != "chat-router":
                await pilot.press("down")
            end = asyncio.get_running_loop().time() + 10
            while "routed " not in (text := screen_text(app)) or " req/s" not in text:
                assert asyncio.get_running_loop().time() < end, text
                await pilot.pause(0.2)
            line = text.split("routed ", 1)[1].split("\n", 1)[0]
            assert "req/s" in line and "chat-0 " in line and "chat-1 " in line, line
    finally:
        stop.set()
        for t in loaders:
            t.join(35)


@pytest.mark.slow
def test_replicas_changed_while_the_group_runs(tmp_path: Path, session: str) -> None:
    """`replicas = 2` → 3 in the layout, handed over as the dashboard does (POST /layout): chat-2 starts
    and the router adds it (/add_worker); → 2 again with `vtui up`: chat-2 leaves the router first
    (/remove_worker), then stops, and is gone from `vtui ps`; chat-0 and chat-1 run on untouched."""
    import tomllib

    from vtui.service.client import ServiceClient

    port = port_run(4)  # below the ephemeral range (_support.ports): three replicas', then the router's
    router_port = port + 3
    path = write_layout(tmp_path, session, [group_entry("chat", port, router_port)])
    up = vtui("up", str(path), timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr
    urls = [f"http://127.0.0.1:{port + i}" for i in range(3)]
    wait_for(lambda: workers(router_port) == set(urls[:2]), timeout=15, what="both replicas in the router")
    pids = {n: r["pid"] for n, r in ps_rows(str(path)).items()}

    def rescale(count: int) -> None:
        data = tomllib.loads(path.read_text())
        data["instance"][0]["replicas"] = count
        write_layout(tmp_path, session, data["instance"])

    rescale(3)
    ServiceClient(session).post("/layout", {"path": str(path)})  # no /start: the dashboard's reload
    wait_for(lambda: workers(router_port) == set(urls), timeout=30, what="chat-2 added to the router")
    rows = ps_rows(str(path))
    assert set(rows) == {"chat-0", "chat-1", "chat-2", "chat-router"} and rows["chat-2"]["state"] == "ready"
    assert rows["chat-2"]["port"] == port + 2 and sorted(rows["chat-router"]["workers"]) == [
        "chat-0",
        "chat-1",
        "chat-2",
    ]
    assert complete(router_port) == 200
    chat2 = rows["chat-2"]["pid"]

    seen: list[set[str]] = []  # the router's workers while chat-2 still answers: it left first
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                httpx.get(f"{urls[2]}/health", timeout=1, trust_env=False).raise_for_status()
            except httpx.HTTPError:
                return
            seen.append(workers(router_port))
            time.sleep(0.05)

    answered: list[int] = []  # a request in flight on chat-2 while it is scaled away: drained, not cut

    def long_request() -> None:
        body = {"model": SMALL_MODEL, "prompt": "hello", "max_tokens": 1024, "ignore_eos": True}
        answer = httpx.post(f"{urls[2]}/v1/completions", json=body, timeout=60, trust_env=False)
        answered.append(answer.status_code)

    statuses: list[list[str]] = []  # what a dashboard's feed says runs

    def feed() -> None:
        for message in ServiceClient(session).feed(timeout=60):
            if message["type"] in ("hello", "status"):
                statuses.append([i["name"] for i in message["instances"]])
            if done.is_set():
                return

    threading.Thread(target=feed, daemon=True).start()
    wait_for(lambda: statuses, timeout=10, what="the feed's hello")
    rescale(2)
    asker = threading.Thread(target=long_request)
    asker.start()
    wait_for(lambda: _running(port + 2), timeout=10, what="the request running on chat-2")
    watcher = threading.Thread(target=watch)
    watcher.start()
    up = vtui("up", str(path), timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr
    asker.join(60)
    assert answered == [200]
    wait_for(lambda: "chat-2" not in ps_rows(str(path)), timeout=30, what="chat-2 stopped and forgotten")
    wait_for(lambda: "chat-2" not in statuses[-1], timeout=5, what="a snapshot without chat-2 on the feed")
    done.set()
    watcher.join(5)
    wait_for(lambda: not _alive(chat2), timeout=10, what="chat-2's process gone")
    assert workers(router_port) == set(urls[:2])
    assert any(urls[2] not in s for s in seen), f"chat-2 never left the router while it served: {seen[-3:]}"
    after = ps_rows(str(path))
    assert {n: after[n]["pid"] for n in ("chat-0", "chat-1", "chat-router")} == {
        n: pids[n] for n in ("chat-0", "chat-1", "chat-router")
    }
    assert complete(router_port) == 200
    down = vtui("down", str(path), timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr


def _running(port: int) -> bool:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5, trust_env=False).text
    return (
        parse_metrics(text, frozenset({"vllm:num_requests_running"})).total("vllm:num_requests_running") or 0
    ) > 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
