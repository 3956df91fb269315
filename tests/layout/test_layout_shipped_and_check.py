"""The shipped layouts validate, `vtui check` prints problems and exits 2, and keys find their lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vtui.cli import main
from vtui.layouts import load_layout_with_warnings
from vtui.layouts.lookup import BUILTIN_DIR
from vtui.layouts.text import VAR_REF, LineIndex

SHIPPED = sorted(BUILTIN_DIR.glob("*.toml"))


def _define_referenced_vars(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Give every `${VAR}` without a default a placeholder, as a user's environment would."""
    for match in VAR_REF.finditer(path.read_text(encoding="utf-8")):
        if match.group(2) is None:
            monkeypatch.setenv(match.group(1), f"/placeholder/{match.group(1).lower()}")


def test_the_expected_layouts_ship() -> None:
    names = {p.name for p in SHIPPED}
    assert {"vllm-cpu.toml", "throughput.toml", "latency.toml"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_layout_validates_without_warnings(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _define_referenced_vars(path, monkeypatch)
    layout, warnings = load_layout_with_warnings(path)
    assert layout.instances
    assert warnings == []  # shipped layouts bind loopback and hold no secrets


def test_vllm_cpu_layout_matches_the_reference_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VTUI_TINY_MODEL", "/models/tiny")
    monkeypatch.delenv("VTUI_VLLM", raising=False)
    layout, _ = load_layout_with_warnings(BUILTIN_DIR / "vllm-cpu.toml")
    a, b = layout.instances
    assert [a.env["VLLM_CPU_OMP_THREADS_BIND"], b.env["VLLM_CPU_OMP_THREADS_BIND"]] == ["0", "1"]
    assert a.port != b.port
    for spec in (a, b):
        assert spec.model == "/models/tiny" and spec.engine == "vllm"
        argv = spec.argv()
        assert argv[:3] == ["vllm", "serve", "/models/tiny"]
        for pair in (["--kv-cache-memory-bytes", "64M"], ["--max-model-len", "512"], ["--dtype", "float32"]):
            assert any(argv[i : i + 2] == pair for i in range(len(argv))), argv
        assert "--enforce-eager" in argv


@pytest.mark.parametrize(
    ("name", "tp", "gpus", "flags"),
    [
        (
            "throughput.toml",
            4,
            (0, 1, 2, 3),
            {
                "gpu-memory-utilization": 0.92,
                "max-model-len": 8192,
                "max-num-batched-tokens": 65536,
                "max-num-seqs": 512,
                "enable-chunked-prefill": True,
                "served-model-name": "qwen3",
            },
        ),
        (
            "latency.toml",
            2,
            (0, 1),
            {
                "gpu-memory-utilization": 0.88,
                "max-model-len": 8192,
                "max-num-batched-tokens": 4096,
                "max-num-seqs": 128,
                "served-model-name": "qwen3",
            },
        ),
    ],
)
def test_seed_presets(name: str, tp: int, gpus: tuple, flags: dict) -> None:
    layout, _ = load_layout_with_warnings(BUILTIN_DIR / name)
    (spec,) = layout.instances
    assert spec.gpus == gpus and spec.flags["tensor-parallel-size"] == tp
    assert {k: spec.flags[k] for k in flags} == flags
    assert spec.host == "127.0.0.1"


def test_check_ok_prints_one_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    path = BUILTIN_DIR / "latency.toml"
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f'{path}: OK: session "latency", 1 instance: qwen3-latency (vllm :8000 gpus 0,1)']


def test_check_prints_every_problem_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).with_name("bad") / "every_problem_at_once.toml"
    assert main(["check", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert len(lines) == 5
    assert all(line.startswith(f"{path}:") for line in lines)
    assert f'{path}:16: instance[1].flags.max-num-seqs: expected an integer, got "many"' in lines
    assert "5 problems" in captured.err


def test_check_prints_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "open.toml"
    path.write_text(
        '[[instance]]\nname = "a"\nmodel = "m"\nport = 8000\nhost = "0.0.0.0"\n', encoding="utf-8"
    )
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"warning: {path}:5: instance[0].host:")
    assert re.search(r"OK: .*1 warning", out)


def test_check_without_layout_or_last_session(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 2
    assert "pass a layout file" in capsys.readouterr().out


def test_line_index_places_keys() -> None:
    text = """[session]
name = "x"
[[instance]]
name = "a"
flags = { max-num-seqs = 8, "dtype" = "half" }
env.A = "1"
[instance.flags]
block-size = 16
[[instance]]
name = "b"
[instance.env]
B = "2"
"""
    index = LineIndex(text)
    assert index.line_of("session.name") == 2
    assert index.line_of("instance[0].flags.max-num-seqs") == 5
    assert index.line_of("instance[0].flags.dtype") == 5
    assert index.line_of("instance[0].env.A") == 6
    assert index.line_of("instance[0].flags.block-size") == 8
    assert index.line_of("instance[1].env.B") == 12
    assert index.line_of("instance[1].port") == 9  # absent: its [[instance]] header
    assert index.line_of("nothing") is None
