"""`replicas = N` as the supervisor runs it (supervisor.replicas): names, ports, GPU sets (listed, split, chosen
by free memory, kept across a re-read), the router's spec and command line, group names in start/stop,
and the membership a router should have (READY replicas only, not one being stopped)."""

from __future__ import annotations

import pytest

from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.runstate import spec_from_dict, spec_to_dict
from vtui.core.selfrun import module_argv
from vtui.core.state import State
from vtui.supervisor import replicas
from vtui.supervisor.preflight import preflight
from vtui.supervisor.replicas import RouterHub, choose_gpus, supervised
from vtui.supervisor.supervisor import Supervisor

GIB = 1 << 30


def group(**kw: object) -> InstanceSpec:
    fields: dict = {"name": "chat", "model": "m", "port": 8100, "replicas": 2, "router_port": 9000}
    fields.update(kw)
    return InstanceSpec(**fields)


def layout(*specs: InstanceSpec) -> Layout:
    return Layout(SessionSpec(name="s"), specs)


def test_names_ports_and_listed_or_split_gpus() -> None:
    out = supervised(layout(group(replicas=3, gpus=(0, 1, 2, 3, 4, 5))), port_for_metrics=lambda: 9999)
    assert [(s.name, s.port, s.gpus, s.group) for s in out.instances] == [
        ("chat-0", 8100, (0, 1), "chat"),
        ("chat-1", 8101, (2, 3), "chat"),
        ("chat-2", 8102, (4, 5), "chat"),
        ("chat-router", 9000, (), "chat"),
    ]
    assert all(s.replicas == 1 and s.router_port is None for s in out.instances)
    listed = supervised(layout(group(replica_gpus=((3,), (1,)))), port_for_metrics=lambda: 9999)
    assert [s.gpus for s in listed.instances] == [(3,), (1,), ()]


def test_gpus_chosen_by_free_memory_skip_gpus_other_instances_list() -> None:
    other = InstanceSpec(name="big", model="m", port=7000, gpus=(0,))
    free = {0: 70 * GIB, 1: 10 * GIB, 2: 60 * GIB, 3: 60 * GIB}
    out = supervised(layout(other, group()), free_memory=free, port_for_metrics=lambda: 9999)
    assert [s.gpus for s in out.instances if s.group] == [(2,), (3,), ()]  # GPU 0 is big's; 1 has least free
    tp2 = group(flags={"tensor-parallel-size": 2})
    assert choose_gpus(tp2, free, taken=set()) == ((0, 2), (1, 3))  # most free first, sets sorted
    assert choose_gpus(tp2, free, taken={0}) is None  # 3 GPUs for 2 × TP 2: too few
    # too few GPUs: unpinned (the replicas share GPU 0, as any unpinned instance does; preflight warns)
    assert [s.gpus for s in supervised(layout(tp2), free_memory={0: GIB}).instances] == [(), (), ()]


def test_a_reread_layout_keeps_the_chosen_gpus_and_the_routers_metrics_port() -> None:
    first = supervised(layout(group()), free_memory={0: GIB, 1: 2 * GIB}, port_for_metrics=lambda: 9101)
    keep = {s.name: s for s in first.instances}
    again = supervised(
        layout(group()), free_memory={0: 9 * GIB, 1: GIB}, keep=keep, port_for_metrics=lambda: 9202
    )
    assert [s.gpus for s in again.instances] == [(1,), (0,), ()]
    assert again.instances[-1].flags["prometheus-port"] == 9101


def test_no_router_port_means_replicas_only_and_a_plain_layout_is_untouched() -> None:
    plain = layout(InstanceSpec(name="a", model="m", port=1))
    assert supervised(plain) is plain
    out = supervised(layout(group(router_port=None)))
    assert [s.name for s in out.instances] == ["chat-0", "chat-1"]


def test_router_spec_command_line_and_record_round_trip() -> None:
    router = supervised(layout(group(host="127.0.0.1")), port_for_metrics=lambda: 9555).instances[-1]
    assert router.engine == "router" and router.health_url == "http://127.0.0.1:9000/liveness"
    argv = router.argv()
    start = module_argv("vtui.supervisor.routerproc")
    assert argv[: len(start)] == start
    assert "m" not in argv  # a router takes no model argument
    assert argv[len(start) : len(start) + 4] == ["--host", "127.0.0.1", "--port", "9000"]
    assert argv[argv.index("--prometheus-port") + 1] == "9555"
    assert argv[argv.index("--policy") + 1] == "round_robin"
    assert "CUDA_VISIBLE_DEVICES" not in router.process_env({})
    assert spec_from_dict(spec_to_dict(router)) == router  # run records keep engine and group
    replica = supervised(layout(group())).instances[0]
    assert spec_from_dict(spec_to_dict(replica)).group == "chat"


def test_preflight_checks_the_copies_and_says_when_vllm_router_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    with socket.socket() as sock:  # a free port for chat-1 (chat-0's is not checked)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1] - 1
    entry = layout(group(port=port, router_port=port + 1, gpus=(0, 1)))
    monkeypatch.setattr(replicas, "router_installed", lambda: False)
    problems = preflight(entry, ["chat"], nvml=None, cpu_count=64).problems
    assert any("need vllm-router" in p and "pip install 'vtui[router]'" in p for p in problems), problems
    monkeypatch.setattr(replicas, "router_installed", lambda: True)
    assert not preflight(entry, ["chat-1"], nvml=None, cpu_count=64).problems  # a replica: no router


def test_a_group_name_stands_for_its_replicas_and_router() -> None:
    sup = Supervisor(layout(group(gpus=(0, 1)), InstanceSpec(name="solo", model="m", port=1)))
    assert sup.layout.names() == ["chat-0", "chat-1", "chat-router", "solo"]
    assert sup.resolve(["chat"]) == ["chat-0", "chat-1", "chat-router"]
    assert sup.resolve(["chat-1", "solo"]) == ["chat-1", "solo"]
    with pytest.raises(KeyError):
        sup.resolve(["nope"])
    assert sup.launcher.router is sup.routers  # the drain before a replica's stop asks the router


def test_the_router_should_route_to_ready_replicas_not_one_being_stopped() -> None:
    specs = supervised(layout(group(gpus=(0, 1))), port_for_metrics=lambda: 9999).instances
    states = {"chat-0": State.READY, "chat-1": State.STARTING, "chat-router": State.READY}
    hub = RouterHub(lambda: {s.name: (s, states[s.name]) for s in specs}, lambda *_: None)
    assert hub.groups() == ["chat"]
    assert hub.wanted("chat") == {"http://127.0.0.1:8100": "chat-0"}
    states["chat-1"] = State.UNHEALTHY  # a missed /health: the router's own health check judges it
    assert set(hub.wanted("chat").values()) == {"chat-0", "chat-1"}
    states["chat-1"] = State.CRASHED
    assert set(hub.wanted("chat").values()) == {"chat-0"}
    states["chat-1"] = State.READY
    states["chat-router"] = State.STOPPED  # no HTTP call to a router that is not READY
    hub.stop_routing("s/chat-0")
    assert set(hub.wanted("chat").values()) == {"chat-1"}
    hub.started("chat-0")
    assert set(hub.wanted("chat").values()) == {"chat-0", "chat-1"}


def test_check_says_when_vllm_router_is_missing(tmp_path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from vtui.cli import main

    path = tmp_path / "l.toml"
    path.write_text(
        '[session]\nname = "s"\n[[instance]]\nname = "chat"\nmodel = "org/m"\nengine = "sim"\nport = 8100\n'
        "replicas = 2\nrouter_port = 9000\n"
    )
    monkeypatch.setattr(replicas, "router_installed", lambda: False)
    assert main(["check", str(path)]) == 0
    assert "note: chat: replicas behind a router need vllm-router" in capsys.readouterr().out
    monkeypatch.setattr(replicas, "router_installed", lambda: True)
    assert main(["check", str(path)]) == 0
    assert "need vllm-router" not in capsys.readouterr().out


DP_LAYOUT = """
[session]
name = "s"
[[instance]]
name = "chat"
model = "m"
port = 8100
replicas = 2
router_port = 9000
gpus = [0, 1, 2, 3]
flags.tensor-parallel-size = 2
[[instance]]
name = "one"
model = "m"
port = 8300
gpus = [4, 5, 6, 7]
flags.data-parallel-size = 2
flags.tensor-parallel-size = 2
"""


def test_check_offers_data_parallel_for_a_vllm_replica_group(tmp_path, capsys) -> None:
    """A vLLM replica group gets the one-process alternative (its GPUs and the flag to write) and what
    each way gives up; a layout already using --data-parallel-size is accepted (tensor × data parallel =
    its GPUs) and gets no note, nor does a sim group (the sim runs no data-parallel ranks)."""
    from vtui.cli import main

    path = tmp_path / "l.toml"
    path.write_text(DP_LAYOUT)
    assert main(["check", str(path)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "data-parallel-size" in line]
    assert len(notes) == 1, notes
    (note,) = notes
    assert note.startswith("note: chat: replicas = 2 runs 2 vLLM servers of 2 GPU(s) each behind vllm-router")
    assert "replicas = 1 with flags.data-parallel-size = 2" in note and "4 GPUs in gpus" in note
    assert "no router" in note and "whole server" in note and "rolling restart" in note
    path.write_text(DP_LAYOUT.replace("gpus = [4, 5, 6, 7]", "gpus = [4, 5]"))
    assert main(["check", str(path)]) == 2  # data parallel's ranks count in the GPUs it needs
    assert "tensor-parallel-size × pipeline-parallel-size × data-parallel-size = 4" in capsys.readouterr().out
    assert replicas.data_parallel_alternative(group(engine="sim")) is None
    assert replicas.data_parallel_alternative(group(flags={"data-parallel-size": 2})) is None
    assert replicas.data_parallel_alternative(group(replicas=1, router_port=None)) is None
    assert "of 1 GPU(s) each." in (replicas.data_parallel_alternative(group(router_port=None)) or "")


def test_one_scrape_rule_for_both_paths_a_router_is_scraped_on_its_prometheus_port():
    """`scrape_url` is what the session supervisor's scrape loops follow (the only ones: the dashboard
    scrapes nothing): a router's Prometheus port, a server's own URL, only while it answers."""
    entry = InstanceSpec("chat", "m", 8000, engine="sim", replicas=2, router_port=9000)
    router = replicas.router_spec(entry, prometheus_port=9100)
    assert replicas.scrape_url(router, State.READY) == "http://127.0.0.1:9100"
    server = InstanceSpec("a", "m", 8001, engine="sim")
    assert replicas.scrape_url(server, State.ASLEEP) == server.base_url  # a sleeping vLLM answers /metrics
    assert replicas.scrape_url(server, State.STARTING) is None
    assert replicas.scrape_url(server, State.STOPPED) is None


def test_a_grown_group_keeps_its_replicas_gpus_and_gives_the_new_one_a_free_gpu() -> None:
    free = {0: 9 * GIB, 1: 8 * GIB, 2: 7 * GIB, 3: 60 * GIB}
    first = supervised(layout(group()), free_memory=free, port_for_metrics=lambda: 9101)
    assert [s.gpus for s in first.instances] == [(3,), (0,), ()]
    keep = {s.name: s for s in first.instances}
    free = {0: 1 * GIB, 1: 8 * GIB, 2: 7 * GIB, 3: 2 * GIB}  # the running replicas use GPUs 3 and 0
    grown = supervised(layout(group(replicas=3)), free_memory=free, keep=keep, port_for_metrics=lambda: 9)
    assert [(s.name, s.gpus) for s in grown.instances] == [
        ("chat-0", (3,)),
        ("chat-1", (0,)),
        ("chat-2", (1,)),  # the most free GPU no replica holds (not all three dealt anew)
        ("chat-router", ()),
    ]


async def test_replicas_changed_while_the_group_runs_start_or_stop_the_difference(session_name) -> None:
    """`set_layout` with `replicas = 3` for a running group of 2 starts NAME-2; back to 2 stops NAME-2
    (the highest-numbered) and forgets it; the others run on untouched."""
    import asyncio
    import dataclasses

    from _support.ports import port_run

    from vtui.core.events import Notice
    from vtui.supervisor.launcher import OsLauncher

    from .conftest import fake_spec, until

    port = port_run(3)
    entry = dataclasses.replace(fake_spec("chat", port=port), replicas=2)
    sup = Supervisor(
        Layout(SessionSpec(name=session_name), (entry,)),
        launcher=OsLauncher(grace=3),
        health_interval=0.1,
        poll_interval=0.05,
    )
    notices: list[str] = []
    sup.subscribe(lambda e: notices.append(e.text) if isinstance(e, Notice) else None)
    try:
        await sup.start()
        assert await sup.wait_settled(timeout=20) == {"chat-0": State.READY, "chat-1": State.READY}
        pids = {n: sup.instances[n].handle.pid for n in ("chat-0", "chat-1")}

        sup.set_layout(Layout(SessionSpec(name=session_name), (dataclasses.replace(entry, replicas=3),)))
        assert sup.layout.names() == ["chat-0", "chat-1", "chat-2"]
        assert await until(lambda: sup.instances["chat-2"].state is State.READY, 20), "chat-2 never started"
        assert sup.instances["chat-2"].spec.port == port + 2
        assert any("chat-2: replicas raised" in n for n in notices)

        sup.set_layout(Layout(SessionSpec(name=session_name), (entry,)))
        assert await until(lambda: "chat-2" not in sup.instances, 20), "chat-2 never stopped"
        assert sup.layout.names() == ["chat-0", "chat-1"] and [s.name for s in sup.status()] == [
            "chat-0",
            "chat-1",
        ]
        assert any("chat-2: replicas lowered" in n for n in notices)
        assert "chat-2: scaled away, no longer supervised" in notices
        assert {n: sup.instances[n].handle.pid for n in ("chat-0", "chat-1")} == pids  # untouched
        assert all(sup.instances[n].state is State.READY for n in pids)
        assert not sup.store.all(session_name) or {r.name for r in sup.store.all(session_name)} == set(pids)
    finally:
        await sup.stop()
        await sup.close()
        await asyncio.sleep(0)


def test_a_router_started_by_an_older_vtui_is_found_again_by_its_recorded_command(tmp_path) -> None:
    """The router wrapper moved from `vtui.core.routerproc` to `vtui.supervisor.routerproc`. A router an
    older vtui spawned still runs under the old module name; re-adoption matches the command line its
    run record holds, not today's name, so it is found (and a different command is not)."""
    import os
    import subprocess
    import sys

    import psutil

    from vtui.supervisor.launcher import OsLauncher

    old = [sys.executable, "-c", "import time; time.sleep(60)", "vtui.core.routerproc", "--port", "9000"]
    proc = subprocess.Popen(old)
    try:
        ps = psutil.Process(proc.pid)
        for _ in range(200):  # until exec'd: the command line is the new one
            if "vtui.core.routerproc" in ps.cmdline():
                break
            import time

            time.sleep(0.01)
        found = OsLauncher().find(
            pid=proc.pid,
            create_time=ps.create_time(),
            argv=old,
            key="s/chat-router",
            log_path=tmp_path / "chat-router.log",
        )
        assert found is not None and found.pid == proc.pid and found.pgid == os.getpgid(proc.pid)
        renamed = [*old[:3], "vtui.supervisor.routerproc", *old[4:]]
        assert (
            OsLauncher().find(
                pid=proc.pid,
                create_time=ps.create_time(),
                argv=renamed,
                key="s/chat-router",
                log_path=tmp_path / "x",
            )
            is None
        )
    finally:
        proc.kill()
        proc.wait()


def test_the_layouts_router_metrics_port_is_the_routers_prometheus_port() -> None:
    """Was: always a free port from the ephemeral range, so a Prometheus scrape config could not name it."""
    chosen = supervised(layout(group(router_metrics_port=9090)), port_for_metrics=lambda: 9999).instances[-1]
    assert chosen.flags["prometheus-port"] == 9090
    assert replicas.metrics_base(chosen) == "http://127.0.0.1:9090"
    free = supervised(layout(group()), port_for_metrics=lambda: 9999).instances[-1]
    assert free.flags["prometheus-port"] == 9999
    assert all(s.router_metrics_port is None for s in group(router_metrics_port=9090).replica_specs())
