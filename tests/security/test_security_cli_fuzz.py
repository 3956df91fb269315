"""Bad command lines, generated (Hypothesis): every one exits 2 with a message naming what is wrong, never a
traceback, and nothing is launched. `vtui.cli.main` runs in-process (argparse's own errors arrive as
SystemExit(2)); `OsLauncher.spawn` is replaced by a trap that records any launch."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vtui.cli import main
from vtui.commands.restart import INT_RANGE
from vtui.supervisor.launcher import OsLauncher

EXAMPLES = int(os.environ.get("VTUI_FUZZ_EXAMPLES", "400"))

LAYOUT_KEYS = ("port", "host", "model")
INT_FLAGS = ("max-num-seqs", "max-model-len", "max-num-batched-tokens", "tensor-parallel-size")
BENCH_COUNTS = ("--num-requests", "--input-len", "--output-len", "--gpus")  # whole numbers >= 1
BENCH_POSITIVE = ("--rate", "--duration", "--timeout", "--ttft-target")  # numbers > 0

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=30)
huge_ints = st.one_of(
    st.integers(min_value=INT_RANGE[1] + 1, max_value=10**40), st.integers(max_value=INT_RANGE[0] - 1)
)
bad_seconds = st.one_of(
    st.floats(max_value=-1e-6, allow_nan=False).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "NaN", "1e999", "", "ten", "5s", "--", "0x10"]),
)
bad_line_counts = st.one_of(
    st.integers(max_value=-1).map(str),
    st.integers(min_value=1_000_001, max_value=10**30).map(str),
    st.sampled_from(["", "many", "1.5", "1e3", "nan"]),
)
unknown_names = texts.filter(lambda t: t.strip() and not t.startswith("-") and t.strip() != "svc")


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    layout = tmp_path / "layout.toml"
    layout.write_text(
        tomli_w.dumps(
            {
                "session": {"name": "fuzz"},
                "instance": [
                    {
                        "name": "svc",
                        "engine": "sim",
                        "model": "Qwen/Qwen3-0.6B",
                        "port": 18123,
                        "flags": {"max-model-len": 4096, "sim-startup-scale": 0.0},
                    }
                ],
            }
        )
    )
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    launched: list[str] = []

    def trap(self, spec, **kwargs):
        launched.append(spec.name)
        raise AssertionError(f"a bad command line launched {spec.name}")

    monkeypatch.setattr(OsLauncher, "spawn", trap)
    return {"layout": str(layout), "folder": tmp_path, "launched": launched, "binary": str(binary)}


def bad_command_lines(layout: str) -> st.SearchStrategy[list[str]]:
    restart = ["restart", layout, "svc"]
    sets = st.one_of(
        st.tuples(st.sampled_from(LAYOUT_KEYS), texts).map(lambda kv: f"{kv[0]}={kv[1]}"),
        st.tuples(st.sampled_from(INT_FLAGS), huge_ints).map(lambda kv: f"{kv[0]}={kv[1]}"),
        st.tuples(st.sampled_from(INT_FLAGS), st.sampled_from(["x", "1.5", "", "0x10", "--"])).map(
            lambda kv: f"{kv[0]}={kv[1]}"
        ),
        st.sampled_from(
            ["api-key=sk-1", "--api-key=abc", "nosuchflag=1", "noequals", "=5", "max-num-seqs", "--", ""]
        ),
    )
    return st.one_of(
        sets.map(lambda item: [*restart, f"--set={item}"]),
        unknown_names.map(lambda name: [*restart, "--unset", name.strip()]),
        st.sampled_from(["nosuchflag", "max-num-seqs", "--enforce-eager", "--", ""]).map(
            lambda name: [*restart, f"--unset={name}"]
        ),
        bad_seconds.map(lambda v: [*restart, f"--timeout={v}"]),
        bad_seconds.map(lambda v: ["down", layout, f"--grace={v}"]),
        bad_line_counts.map(lambda v: ["logs", layout, "svc", f"-n={v}"]),
        bad_seconds.map(lambda v: ["metrics", "http://127.0.0.1:9/metrics", f"--timeout={v}"]),
        texts.map(lambda key: ["metrics", "http://127.0.0.1:9", f"--api-key={key}"]),
        unknown_names.map(lambda name: ["logs", layout, name.strip()]),
        unknown_names.map(lambda name: ["restart", layout, name.strip()]),
        unknown_names.map(lambda name: ["down", layout, name.strip()]),
        st.sampled_from(["restart", "logs"]).map(lambda cmd: [cmd, layout, "svc", "svc"]),
        st.sampled_from([["diagnose"], ["metrics"]]).map(lambda cmd: [*cmd, "BINARY"]),
        st.tuples(
            st.sampled_from(BENCH_COUNTS), st.one_of(st.integers(max_value=0).map(str), bad_seconds)
        ).map(lambda kv: ["bench", "http://127.0.0.1:9", f"{kv[0]}={kv[1]}"]),
        st.tuples(st.sampled_from(BENCH_POSITIVE), st.one_of(st.just("0"), bad_seconds)).map(
            lambda kv: ["bench", "http://127.0.0.1:9", f"{kv[0]}={kv[1]}"]
        ),
        st.sampled_from(["a,b", ",", "1,-2", "0", "nan,1"]).map(
            lambda v: ["bench", "http://127.0.0.1:9", "--mode", "ramp", f"--levels={v}"]
        ),
    )


def run_main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # no .hypothesis folder in the tree; a failure prints its example
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_bad_command_lines_exit_2_with_a_message_and_launch_nothing(world: dict, data: st.DataObject) -> None:
    argv = data.draw(bad_command_lines(world["layout"]))
    argv = [world["binary"] if a == "BINARY" else a for a in argv]
    code, out, err = run_main(argv)
    assert code == 2, (argv, code, out, err)
    assert err.strip(), (argv, "no message")
    assert "Traceback (most recent call last)" not in err + out, (argv, err)
    assert world["launched"] == []


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["restart", "L", "svc", "--set", "port=1"], ["port is a layout key", "port = ..."]),
        (["restart", "L", "svc", "--set", "host=0.0.0.0"], ["host is a layout key"]),
        (["restart", "L", "svc", "--set", "max-num-seqs=99999999999999999999999"], ["out of range"]),
        (["restart", "L", "svc", "--unset", "nosuchflag"], ["no flag nosuchflag", "max-model-len"]),
        (["restart", "L", "svc", "--set", "api-key=sk-x"], ["visible to every local user"]),
        (["down", "L", "--grace", "-1"], ["--grace", "-1"]),
        (["logs", "L", "svc", "-n", "-5"], ["-n/--lines", "-5"]),
        (["metrics", "BINARY"], ["blob.bin", "binary data"]),
        (["diagnose", "BINARY"], ["blob.bin", "binary data"]),
        (["metrics", "http://127.0.0.1:9", "--api-key", "sk-x"], ["--api-key-file", "VLLM_API_KEY"]),
        (["bench", "http://127.0.0.1:9", "-n", "-5"], ["-n/--num-requests", ">= 1", "-5"]),
    ],
)
def test_the_reported_command_lines_name_what_is_wrong(
    world: dict, argv: list[str], words: list[str]
) -> None:
    argv = [world["layout"] if a == "L" else world["binary"] if a == "BINARY" else a for a in argv]
    code, out, err = run_main(argv)
    assert code == 2, (code, out, err)
    assert all(w in err for w in words), err
    assert world["launched"] == []


def test_metrics_on_text_without_vllm_metrics_is_refused(world: dict) -> None:
    log = Path(world["folder"]) / "notes.txt"
    log.write_text("hello\nworld\n")
    code, _, err = run_main(["metrics", str(log)])
    assert code == 2 and "no vLLM metrics" in err
