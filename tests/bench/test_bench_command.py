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
