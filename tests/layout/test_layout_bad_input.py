"""Bad input that used to get through: over-deep nesting (RecursionError), hosts that are no host, names
that cannot be file names, huge files (seconds to load and save). Each is one clear problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from vtui.cli import main
from vtui.layouts import LayoutError, load_layout, render_layout
from vtui.layouts.files import MAX_LAYOUT_BYTES
from vtui.layouts.keys import valid_host

ONE = '[[instance]]\nname = "a"\nmodel = "m"\nport = 8001\n'
SIM = ONE + 'engine = "sim"\n'


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "0.0.0.0", "::", "localhost", "gpu-box.lan", "a.b.c."])
def test_hosts_that_are_hosts(host: str) -> None:
    assert valid_host(host)


@pytest.mark.parametrize("host", ["not a host!!", "", "-x.lan", "x..lan", "a" * 64, "http://x", "1.2.3.4:80"])
def test_hosts_that_are_not(host: str) -> None:
    assert not valid_host(host)


def test_check_rejects_a_bad_host_and_a_5000_character_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        ONE + 'host = "not a host!!"\n' + ONE.replace('"a"', '"' + "n" * 5000 + '"').replace("8001", "8002")
    )
    assert main(["check", str(path)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{path}:5: instance[0].host: expected an IP address or a DNS name")
    assert (
        out[1]
        == f"{path}:7: instance[1].name: a name is at most 64 characters (it lands in file names); got 5000"
    )
    assert all(len(line) < 300 for line in out)  # the 5000 characters are not echoed back


def test_a_file_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_text(ONE + "# " + "x" * MAX_LAYOUT_BYTES + "\n")
    with pytest.raises(LayoutError) as caught:
        load_layout(path)
    assert str(caught.value) == f"{path}: " + caught.value.problems[0].message
    assert "larger than the 256 KiB a layout may be" in str(caught.value)


def test_a_save_that_would_go_over_the_limit_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text(ONE)
    layout = load_layout(path)
    grown = layout.replace_instance(layout.instances[0].with_flags({"served-model-name": ["x" * 1000] * 300}))
    with pytest.raises(LayoutError, match=r"ok.toml \(not saved\): larger than"):
        render_layout(grown)


@pytest.mark.parametrize("opener,closer", [("[", "]"), ("{ a = ", "}")])
def test_nesting_5000_deep_is_a_problem_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], opener: str, closer: str
) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(
        ONE
        + "[instance.flags]\nserved-model-name = "
        + opener * 5000
        + "1" * (opener == "{ a = ")
        + closer * 5000
        + "\n"
    )
    assert main(["check", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{path}:6: toml: arrays or inline tables nested too deeply to read")
    assert "Traceback" not in captured.out + captured.err


@pytest.mark.parametrize(("arg", "what"), [("/dev/zero", "a device"), (".", "a directory")])
def test_check_says_what_a_path_is_when_it_is_no_file(
    arg: str, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", arg]) == 2
    assert f"{arg}: {what}, not a layout file" in capsys.readouterr().out


def test_check_refuses_a_sim_model_its_start_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sim fails at once on a model it does not know that is no org/name id (vLLM's hub lookup's
    HFValidationError): check says so at the model's line; org/name and a sized model pass."""
    path = tmp_path / "sim.toml"
    path.write_text(SIM)
    assert main(["check", str(path)]) == 2
    out = capsys.readouterr().out
    assert f"{path}:3: instance[0].model: the sim knows no model 'm'" in out
    for fine in (
        ONE.replace('"m"', '"org/m"') + 'engine = "sim"\n',
        SIM + '[instance.flags]\nsim-params = "1B"\n',
    ):
        path.write_text(fine)
        assert main(["check", str(path)]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("name", ["qwen\\nfake-log-line", "qwen\\u001b[2J", "a\\tb"])
def test_a_served_model_name_with_control_characters_is_refused(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "names.toml"
    path.write_text(ONE + f'[instance.flags]\nserved-model-name = "{name}"\n')
    assert main(["check", str(path)]) == 2
    assert "instance[0].flags.served-model-name: holds a control character" in capsys.readouterr().out


def test_up_refuses_a_negative_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["up", "demo", "--timeout", "-5"])
    assert exited.value.code == 2
    assert "--timeout: expected a number of seconds >= 0, got '-5'" in capsys.readouterr().err


def test_line_numbers_count_only_tomls_line_ends() -> None:
    """A string holding \\x85 or \\u2028 (line breaks to str.splitlines, not to TOML) does not push the
    lines after it down (found by the layout fuzz test: a problem reported past the file's end)."""
    from vtui.layouts.text import LineIndex

    text = '[session]\nname = "a\x85b\u2028c"\n\n[[instance]]\nname = "x"\n'
    index = LineIndex(text)
    assert index.line_of("instance[0]") == 4 and index.line_of("instance[0].name") == 5
