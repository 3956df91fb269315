"""`vtui bench` end to end against the fake server (run on its own thread): NAME through a layout,
results files, baseline save + compare, cost per million tokens."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from vtui.cli import main

from .conftest import FakeServer


@pytest.fixture
def threaded_server():
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, FakeServer] = {}

    def serve() -> None:
        asyncio.set_event_loop(loop)

        async def boot() -> None:
            holder["server"] = await FakeServer(token_delay=0.0).start()
            ready.set()

        loop.run_until_complete(boot())
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield holder["server"]
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def test_bench_by_name_with_baseline_and_cost(threaded_server, tmp_path, capsys):
    layout = tmp_path / "l.toml"
    layout.write_text(f"""
[session]
name = "t"
gpu_hour_price = 2.0

[[instance]]
name = "a"
engine = "sim"
model = "org/m"
port = {threaded_server.port}
gpus = [0, 1]

[instance.flags]
max-num-seqs = 8
tensor-parallel-size = 2
""")
    base = tmp_path / "base.json"
    out = tmp_path / "out"
    argv = [
        "bench",
        "a",
        "--layout",
        str(layout),
        "-c",
        "2",
        "-n",
        "6",
        "--output-len",
        "4",
        "--out",
        str(out),
    ]
    assert main([*argv, "--save-baseline", str(base)]) == 0
    text = capsys.readouterr().out
    assert "c=2" in text and "/M out" in text  # cost shown from the layout's gpu_hour_price
    saved = json.loads(base.read_text())
    assert (
        saved["flags"] == {"max-num-seqs": 8, "tensor-parallel-size": 2}
        and saved["model"] == "org/m"
        and saved["gpus"] == 2
    )
    assert saved["vllm_version"] == "fake-1" and saved["gpu_hour_price"] == 2.0
    assert len(list(out.glob("*.json"))) == 1 and len(list(out.glob("*.csv"))) == 1
    # Comparing against a baseline 10× faster than anything possible: a regression, exit code 1.
    for step in saved["bench"]["steps"]:
        step["req_per_s"] *= 10
    base.write_text(json.dumps(saved))
    assert main([*argv, "--compare", str(base)]) == 1
    assert "REGRESSION" in capsys.readouterr().out


def test_bench_unknown_name_is_one_clear_line(tmp_path, capsys):
    layout = tmp_path / "l.toml"
    layout.write_text('[session]\nname = "t"\n\n[[instance]]\nname = "a"\nmodel = "m"\nport = 9\n')
    assert main(["bench", "nope", "--layout", str(layout)]) == 2
    assert "no instance 'nope'" in capsys.readouterr().err
    assert main(["bench", str(layout), "a", "b"]) == 2  # one instance at a time
    assert "expected [LAYOUT] NAME or a URL" in capsys.readouterr().err


LAYOUT = """
[session]
name = "t"

[[instance]]
name = "a"
engine = "sim"
model = "org/m"
port = {port}

[instance.flags]
max-num-seqs = 64
"""


def _argv(layout, tmp_path, *more):
    return [
        "bench",
        str(layout),  # `[LAYOUT] NAME` as every command takes it (`--layout` too: the tests above)
        "a",
        "-c",
        "2",
        "-n",
        "4",
        "--output-len",
        "2",
        "--out",
        str(tmp_path / "out"),
        *more,
    ]


def test_baseline_records_the_flags_in_effect_not_the_layouts(threaded_server, tmp_path, capsys):
    """After `restart --set max-num-seqs=4` the run record holds 4 while the layout file says 64."""
    from vtui.core.runstate import RunRecord, RunStore

    layout = tmp_path / "l.toml"
    layout.write_text(LAYOUT.format(port=threaded_server.port))
    record = RunRecord(
        session="t", name="a", pid=1, create_time=0.0, pgid=1, sid=1, port=threaded_server.port,
        log_path="", argv=[], flags={"max-num-seqs": 4}, spec={}, started_at=0.0,
    )  # fmt: skip
    RunStore().save(record)
    base = tmp_path / "base.json"
    assert main([*_argv(layout, tmp_path), "--save-baseline", str(base)]) == 0
    saved = json.loads(base.read_text())
    assert saved["flags"] == {"max-num-seqs": 4} and saved["flags_source"] == "the run record"
    # the layout's 64 against the baseline's 4: --compare reports the change
    RunStore().remove("t", "a")
    capsys.readouterr()
    main([*_argv(layout, tmp_path), "--compare", str(base)])
    assert "note: flags: max-num-seqs 4 -> 64" in capsys.readouterr().err


def test_a_url_behind_a_load_balancer_is_detected(threaded_server, tmp_path, capsys):
    threaded_server.start_times = (1_700_000_000.5, 1_700_000_321.25)  # two replicas, scrapes alternate
    argv = [
        "bench",
        threaded_server.base_url,
        "-c",
        "2",
        "-n",
        "6",
        "--output-len",
        "2",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "answered /metrics from 2 processes" in err and "Bench each replica's own URL" in err


def test_one_server_restarting_is_no_load_balancer(threaded_server, tmp_path, capsys):
    threaded_server.start_times = (1_700_000_000.5,)
    argv = [
        "bench",
        threaded_server.base_url,
        "-c",
        "2",
        "-n",
        "4",
        "--output-len",
        "2",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    assert "load balancer" not in capsys.readouterr().err


def test_jitter_and_length_spread_reach_the_requests(threaded_server, tmp_path, capsys):
    argv = [
        "bench",
        threaded_server.base_url,
        "-c",
        "4",
        "-n",
        "8",
        "--output-len",
        "3",
        "--out",
        str(tmp_path),
    ]
    assert (
        main([*argv, "--jitter", "0.2", "--input-len-stddev", "20", "--output-len-stddev", "1", "--json"])
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["config"]["jitter_s"] == 0.2 and result["config"]["input_len_stddev"] == 20
    with pytest.raises(SystemExit) as caught:
        main([*argv, "--jitter", "-1"])
    assert caught.value.code == 2 and "argument --jitter: expected a number >= 0" in capsys.readouterr().err
