"""The installed vLLM's flags where flags are checked: `vtui check` and `vtui restart --set`'s parser
take the parser of the vLLM each instance runs (its `command`, or `vllm` on PATH), cached per version;
the bundled 0.32 schema for the simulated engine. The fake vLLM here is a real argparse parser in a
package named `vllm` (the dump script runs unchanged against it) with a flag 0.32 lacks."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
from _support.fake_vllm import make_fake_vllm, make_moved_vllm

from vtui.cli import main
from vtui.core.flagspec import BUILTIN_FLAGS, parse_flag_value
from vtui.telemetry import flagschema


def _layout(tmp_path: Path, flags: str, command: str = "", engine: str = "vllm") -> Path:
    path = tmp_path / "layout.toml"
    path.write_text(
        textwrap.dedent(
            f"""\
            [session]
            name = "fake"
            [[instance]]
            name = "a"
            model = "some/model"
            engine = "{engine}"
            port = 8123
            {command}
            [instance.flags]
            {flags}
            """
        )
    )
    return path


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    flagschema._MEMO.clear()


def test_check_accepts_a_flag_only_the_installed_vllm_has(tmp_path: Path, capsys) -> None:
    vllm = make_fake_vllm(tmp_path / "fake")
    assert "fancy-new-flag" not in BUILTIN_FLAGS
    path = _layout(
        tmp_path, 'fancy-new-flag = 7\nperformance-mode = "throughput"', f'command = ["{vllm}", "serve"]'
    )
    assert main(["check", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "a: flags: installed vLLM 0.99.0 (installed)" in out and "OK" in out
    assert "reading vLLM 0.99.0's serve flags" in err  # the one slow read is said, not silent
    flagschema._MEMO.clear()
    assert main(["check", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "a: flags: installed vLLM 0.99.0 (cache)" in out and "reading" not in err  # once per version


def test_check_rejects_what_the_installed_vllm_rejects(tmp_path: Path, capsys) -> None:
    vllm = make_fake_vllm(tmp_path / "fake")
    command = f'command = ["{vllm}", "serve"]'
    # a choice the fake vLLM does not offer (its parser's choices, not 0.32's: 0.32 has no such flag)
    assert main(["check", str(_layout(tmp_path, 'performance-mode = "fastest"', command))]) == 2
    assert 'flags.performance-mode: expected one of balanced, throughput, latency; got "fastest"' in (
        capsys.readouterr().out
    )
    # a bundled 0.32 flag the fake vLLM lacks
    assert main(["check", str(_layout(tmp_path, "enforce-eager = true", command))]) == 2
    assert (
        "layout.toml:10: instance[0].flags.enforce-eager: not a flag of vLLM 0.99.0"
        in capsys.readouterr().out
    )


def test_vllm_on_path_is_the_default(tmp_path: Path, monkeypatch, capsys) -> None:
    vllm = make_fake_vllm(tmp_path / "fake")
    monkeypatch.setenv("PATH", f"{vllm.parent}{os.pathsep}{os.environ['PATH']}")
    path = _layout(tmp_path, "fancy-new-flag = 7")
    assert main(["check", str(path)]) == 0
    assert "installed vLLM 0.99.0" in capsys.readouterr().out


def test_without_vllm_the_newest_bundled_schema_warns_on_a_flag_it_does_not_know(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """No vLLM to ask: the newest bundled schema stands in; a flag outside it may be the target's, so
    it is a warning (kept), while a bad value of a flag it knows is still refused."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    path = _layout(tmp_path, "fancy-new-flag = 7")
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "warning: " + str(path) + ":10: instance[0].flags.fancy-new-flag: unknown flag, passed on as "
        "written: no vllm on PATH"
    ) in out
    assert main(["check", str(_layout(tmp_path, 'enable-extensible-kv-cache = "yes"'))]) == 2
    assert main(["check", str(_layout(tmp_path, "enable-extensible-kv-cache = false"))]) == 0  # 0.34's


def test_sim_layout_check_runs_no_subprocess(tmp_path: Path, monkeypatch) -> None:
    vllm = make_fake_vllm(tmp_path / "fake")
    monkeypatch.setenv("PATH", f"{vllm.parent}{os.pathsep}{os.environ['PATH']}")

    def refuse(*args, **kwargs):
        raise AssertionError("a sim layout must not run vLLM")

    monkeypatch.setattr(flagschema.subprocess, "run", refuse)
    path = _layout(tmp_path, "max-num-seqs = 4", engine="sim")
    started = time.perf_counter()
    assert main(["check", str(path)]) == 0
    assert time.perf_counter() - started < 5
    assert flagschema.schema_for("sim", None).source == "builtin"


def test_restart_set_parses_with_the_installed_schema(tmp_path: Path) -> None:
    vllm = make_fake_vllm(tmp_path / "fake")
    schema = flagschema.schema_for("vllm", [str(vllm), "serve"])
    assert schema.source == "installed" and schema.label() == "flags: installed vLLM 0.99.0 (installed)"
    assert parse_flag_value("fancy-new-flag", "9", schema.flags) == 9
    assert parse_flag_value("-tp", "2", schema.flags) == 2
    with pytest.raises(ValueError, match="unknown flag"):
        parse_flag_value("fancy-new-flag", "9")  # the bundled schema does not know it
    with pytest.raises(ValueError, match="unknown flag"):
        parse_flag_value("enforce-eager", "true", schema.flags)
    from vtui.commands.restart import parse_sets

    assert parse_sets(["fancy-new-flag=5", "-tp=2"], schema.flags) == {
        "fancy-new-flag": 5,
        "tensor-parallel-size": 2,
    }
    with pytest.raises(ValueError, match="unknown flag"):
        parse_sets(["fancy-new-flag=5"])


@pytest.mark.vllm
@pytest.mark.slow
def test_real_vllm_cpu_check(vllm_bin: Path, tmp_path: Path, capsys) -> None:
    command = f'command = ["{vllm_bin}", "serve"]'
    assert main(["check", str(_layout(tmp_path, "max-num-seqs = 4\nenforce-eager = true", command))]) == 0
    assert "a: flags: installed vLLM 0.32" in capsys.readouterr().out
    flagschema._MEMO.clear()
    assert main(["check", str(_layout(tmp_path, 'kv-cache-dtype = "fp9"', command))]) == 2
    out = capsys.readouterr().out
    assert "instance[0].flags.kv-cache-dtype: expected one of" in out and "fp8" in out


def test_a_vllm_reorganised_as_rfc_54653_proposes_is_read_through_its_entry_point(tmp_path: Path) -> None:
    """vllm-project/vllm issue #54653 (and draft PR #54654, closed) move the serving code under
    vllm/frontend/; without the old module paths the serve parser is reached through `vllm serve`."""
    vllm = make_moved_vllm(tmp_path / "moved")
    schema = flagschema.installed_schema([str(vllm)])
    assert (schema.source, schema.vllm_version, schema.error) == ("installed", "0.99.1", None)
    assert {"fancy-new-flag", "performance-mode", "tensor-parallel-size"} <= set(schema.flags)


@pytest.mark.vllm
@pytest.mark.slow
def test_real_vllm_cpu_through_its_entry_point(vllm_bin: Path, monkeypatch) -> None:
    monkeypatch.setenv("VTUI_FLAGSCHEMA_VIA", "entry-point")
    schema = flagschema.installed_schema([str(vllm_bin)], refresh=True)
    assert schema.source == "installed", schema.error
    # the same options as the module route, less --model (the serve subcommand takes the model as
    # its positional argument and drops the option)
    assert set(BUILTIN_FLAGS) - set(schema.flags) == {"model"} and set(schema.flags) <= set(BUILTIN_FLAGS)
