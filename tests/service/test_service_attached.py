"""Attached servers end to end, and the session's Prometheus endpoint: a `vtui sim` this test starts (no
vtui marker: nothing of the session's) is attached by URL beside a launched sim and a dead URL. It is
watched (READY, samples in the supervisor's history), never started, stopped or restarted (`down` leaves
it serving and says so; restart/sleep/wake exit 2), the dead URL is UNREACHABLE; `[session]
metrics_port` serves every instance's `vllm:` families with an `instance` label plus vtui's own series,
read back by the project's parser and by prometheus_client's."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import tomli_w

from vtui.service.client import ServiceClient
from vtui.telemetry.promtext import parse_labels, parse_metrics

from .conftest import free_port, healthy, ps_rows, sim_instance, vtui, wait_for

pytestmark = pytest.mark.timeout(180)


def _layout(folder: Path, session: str, ext_port: int, metrics_port: int) -> tuple[Path, dict]:
    data = {
        "session": {"name": session, "metrics_port": metrics_port},
        "instance": [
            sim_instance("a", gpus=(1,)),  # the outside sim holds simulated GPU 0
            {"name": "ext", "engine": "external", "url": f"http://127.0.0.1:{ext_port}", "model": "outside"},
            {"name": "gone", "engine": "external", "url": f"http://127.0.0.1:{free_port()}"},
        ],
    }
    path = folder / "layout.toml"
    path.write_text("# attached servers beside a launched one\n" + tomli_w.dumps(data))
    return path, data


def test_an_attached_sim_is_watched_exported_and_never_stopped(
    tmp_path: Path, session: str, outside_sim: int
) -> None:
    metrics_port = free_port()
    path, data = _layout(tmp_path, session, outside_sim, metrics_port)
    up = vtui("up", str(path))
    assert up.returncode == 1, up.stdout + up.stderr  # "gone" does not answer
    assert "ext: ready on http://127.0.0.1:" in up.stdout and "attached" in up.stdout
    assert "gone: unreachable: http://127.0.0.1:" in up.stderr and "connection refused" in up.stderr
    rows = ps_rows(str(path))
    assert (rows["a"]["state"], rows["ext"]["state"], rows["gone"]["state"]) == (
        "ready",
        "ready",
        "unreachable",
    )
    assert rows["ext"]["pid"] is None and rows["ext"]["url"] == f"http://127.0.0.1:{outside_sim}"

    client = ServiceClient(session)
    # watched like the others: its gauges (the supervisor's scrapes) go into the history
    samples = wait_for(lambda: client.get("/history?name=ext")["samples"], timeout=30, what="ext's samples")
    assert samples[-1]["kv_usage"] is not None and samples[-1]["kv_capacity_tokens"]

    # one Prometheus target for the whole session
    def scrape() -> str:
        return httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5, trust_env=False).text

    def both_exported() -> str | None:
        text = scrape()
        found = {
            dict(parse_labels(raw)).get("instance")
            for raw, _ in parse_metrics(text).series.get("vllm:num_requests_running", ())
        }
        return text if {"a", "ext"} <= found else None

    text = wait_for(both_exported, timeout=30, what="both instances' vllm: families exported")
    check_exposition(text, states={"a": "ready", "ext": "ready", "gone": "unreachable"})

    for command in (["restart", "ext"], ["sleep", "ext"], ["wake", "ext"]):
        refused = vtui(*command[:1], str(path), *command[1:])
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "attached server" in refused.stderr and "never starts, stops or restarts it" in refused.stderr

    logs = vtui("logs", str(path), "ext")
    assert logs.returncode != 0 and "its log is where it runs" in logs.stderr

    down = vtui("down", str(path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert (
        "a: stopped" in down.stdout
        and "ext: left running" in down.stdout
        and "gone: left running" in down.stdout
    )
    assert healthy(outside_sim)  # never stopped
    time.sleep(1.5)  # a probe or two later: still watched, still READY
    rows = ps_rows(str(path))
    assert (rows["a"]["state"], rows["ext"]["state"]) == ("stopped", "ready")

    # a new layout drops the attached servers and moves the endpoint: no trace of them is left
    moved = free_port()
    data["session"]["metrics_port"] = moved
    data["instance"] = data["instance"][:1]
    path.write_text(tomli_w.dumps(data))
    again = vtui("up", str(path))
    assert again.returncode == 0, again.stdout + again.stderr
    assert set(ps_rows(str(path))) == {"a"}
    text = httpx.get(f"http://127.0.0.1:{moved}/metrics", timeout=5, trust_env=False).text
    assert 'instance="ext"' not in text and 'vtui_instance_state{instance="a",state="ready"} 1' in text
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5, trust_env=False)
    assert vtui("down", str(path)).returncode == 0


def check_exposition(text: str, states: dict[str, str]) -> None:
    """HELP and TYPE once per family, each family's samples in one group, every sample parseable, the
    instance labels and vtui's own series as documented (service/exporter.py)."""
    seen_type: set[str] = set()
    current = None
    closed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name = line.split()[2]
            assert name not in seen_type, f"TYPE twice for {name}"
            seen_type.add(name)
            if current is not None:
                closed.add(current)
            current = name
        elif line and not line.startswith("#"):
            sample = line.split("{")[0].split(" ")[0]
            assert current is not None and sample.startswith(current), line
            assert current not in closed
    assert len([line for line in text.splitlines() if line.startswith("# HELP ")]) == len(seen_type)

    names = [line.split("{")[0] for line in text.splitlines() if line.startswith("vllm:")]
    snap = parse_metrics(text, wanted=names)  # the project's reader: the vllm: families
    assert snap.malformed == 0 and snap.names() == set(names)

    def labelled(family: str) -> list[tuple[dict[str, str], float]]:  # vtui's own, by the same label reader
        rows = [line for line in text.splitlines() if line.startswith(family + "{")]
        return [
            (dict(parse_labels(r[r.index("{") + 1 : r.rindex("}")])), float(r.rsplit(" ", 1)[1]))
            for r in rows
        ]

    state = {
        (labels["instance"], labels["state"]): value for labels, value in labelled("vtui_instance_state")
    }
    for name, expected in states.items():
        assert state[(name, expected)] == 1
        assert sum(v for (n, _), v in state.items() if n == name) == 1  # one-hot
    assert {labels["instance"] for labels, _ in labelled("vtui_instance_restarts_total")} == set(states)
    assert {labels["instance"]: labels["engine"] for labels, _ in labelled("vtui_instance_info")} == {
        "a": "sim",
        "ext": "external",
        "gone": "external",
    }
    held = {labels["instance"] for labels, v in labelled("vtui_instance_gpu_memory_bytes") if v > 0}
    assert {"a", "ext"} <= held  # simulated GPU memory, attributed: ext by the pid listening on its port
    assert {labels["instance"] for labels, _ in snap.labelled("vllm:num_requests_running")} == {"a", "ext"}

    prometheus = pytest.importorskip("prometheus_client.parser")
    families = {f.name: f for f in prometheus.text_string_to_metric_families(text)}
    assert families["vtui_instance_state"].type == "gauge"
    running = families["vllm:num_requests_running"]
    assert {s.labels["instance"] for s in running.samples} == {"a", "ext"}
    ttft = families["vllm:time_to_first_token_seconds"]
    assert ttft.type == "histogram" and {s.labels["instance"] for s in ttft.samples} == {"a", "ext"}


def test_an_attached_only_session_keeps_its_supervisor_until_down(
    tmp_path: Path, session: str, outside_sim: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of the session's runs and no client is attached, but `vtui up` brought an attached server
    up: the supervisor stays to watch it (past its idle grace), a successor after a kill -9 too (the
    intent is persisted), until `vtui down` — then it leaves as an idle one does. A `vtui ps` alone
    (nothing brought up) starts a supervisor that leaves."""
    from .conftest import supervisors

    monkeypatch.setenv("VTUI_SUPERVISOR_IDLE_S", "1")
    data = {
        "session": {"name": session},
        "instance": [{"name": "ext", "engine": "external", "url": f"http://127.0.0.1:{outside_sim}"}],
    }
    path = tmp_path / "layout.toml"
    path.write_text(tomli_w.dumps(data))
    assert ps_rows(str(path))["ext"]["state"] in ("stopped", "ready")  # ps starts one; not brought up
    wait_for(lambda: not supervisors(session), timeout=15, what="the supervisor `ps` started to leave")

    up = vtui("up", str(path))
    assert up.returncode == 0, up.stdout + up.stderr
    (first,) = supervisors(session)
    time.sleep(4)  # four idle graces with nothing running and no client
    assert supervisors(session) == [first] and first.is_running()
    first.kill()
    first.wait(10)
    assert ps_rows(str(path))["ext"]["state"] == "ready"  # a successor, started by ps
    (second,) = supervisors(session)
    time.sleep(4)
    assert second.is_running() and supervisors(session) == [second]

    down = vtui("down", str(path))
    assert down.returncode == 0 and "ext: left running" in down.stdout, down.stdout + down.stderr
    wait_for(lambda: not supervisors(session), timeout=15, what="the supervisor to leave after down")
    assert healthy(outside_sim)
