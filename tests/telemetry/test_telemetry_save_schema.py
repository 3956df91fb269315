"""Saving a layout checks its flags against each instance's own vLLM (`flagschema.save_check`), as `vtui
check` does: a flag only the installed vLLM has is saved (in place, comments kept), one it lacks is
refused, and an instance whose vLLM is not installed is checked against the bundled schema with a note.
The fake vLLMs are real argparse parsers in a package named `vllm` (tests/_support/fake_vllm.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _support.fake_vllm import make_fake_vllm, make_vllm_033

from vtui.commands import restart
from vtui.core.flagspec import BUILTIN_FLAGS, GuessedFlags
from vtui.layouts import LayoutError, load_layout, save_layout
from vtui.telemetry import flagschema


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    flagschema._MEMO.clear()


def _layout(tmp_path: Path, command: Path, flags: str) -> Path:
    path = tmp_path / "layout.toml"
    path.write_text(
        textwrap.dedent(
            f"""\
            [session]
            name = "save"

            # the instance on the installed vLLM
            [[instance]]
            name = "a"
            model = "some/model"
            port = 8123
            command = ["{command}", "serve"]
            [instance.flags]
            {flags}  # tuned by hand
            """
        )
    )
    return path


def test_a_flag_only_the_installed_vllm_has_is_saved_in_place(tmp_path: Path) -> None:
    vllm = make_fake_vllm(tmp_path / "fake")
    assert "fancy-new-flag" not in BUILTIN_FLAGS
    path = _layout(tmp_path, vllm, "fancy-new-flag = 7")
    layout = load_layout(path, flags=flagschema.layout_flags(path))
    changed = layout.replace_instance(layout.instance("a").with_flags({"fancy-new-flag": 9}, ()))
    with pytest.raises(LayoutError, match="fancy-new-flag"):
        save_layout(changed)  # the bundled 0.32 schema alone refuses it
    check = flagschema.save_check(changed)
    assert check.problems == () and check.notes == ()
    save_layout(changed, flags=check.flags)
    text = path.read_text()
    assert "fancy-new-flag = 9  # tuned by hand" in text  # edited in place: the comments stay
    assert "# the instance on the installed vLLM" in text


def test_a_flag_the_installed_vllm_lacks_is_refused(tmp_path: Path) -> None:
    vllm = make_vllm_033(tmp_path / "v033")
    path = _layout(tmp_path, vllm, "max-num-seqs = 8")
    layout = load_layout(path, flags=flagschema.layout_flags(path))
    changed = layout.replace_instance(
        layout.instance("a").with_flags({"enable-prefix-caching": False, "max-model-len": 4096}, ())
    )
    check = flagschema.save_check(changed)
    # max-model-len is in the bundled 0.32 schema, but not a flag of this instance's vLLM
    assert check.problems == ("a: flags.max-model-len: not a flag of vLLM 0.33.0",)


def test_without_vllm_the_bundled_schema_checks_with_a_note(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    path = tmp_path / "layout.toml"
    path.write_text(
        '[session]\nname = "s"\n'
        '[[instance]]\nname = "real"\nmodel = "m"\nport = 8001\n[instance.flags]\nmax-num-seqs = 8\n'
        '[[instance]]\nname = "sim"\nmodel = "m"\nport = 8002\nengine = "sim"\n'
    )
    layout = load_layout(path)
    check = flagschema.save_check(layout)
    assert isinstance(check.flags, GuessedFlags) and check.problems == ()
    assert check.notes == (  # not sim
        "real: flags: vtui's bundled vLLM 0.34.0 schema, the newest it knows: no vllm on PATH; a flag it "
        "does not know is warned about, not refused",
    )


def test_restart_save_keeps_a_flag_of_the_installed_vllm(tmp_path: Path, capsys) -> None:
    """`vtui restart --save`'s last step: the file as it is now, with the instance's flags in effect."""
    vllm = make_fake_vllm(tmp_path / "fake")
    path = _layout(tmp_path, vllm, "fancy-new-flag = 7")
    assert restart.save_flags(path, "a", {"fancy-new-flag": 11, "max-num-seqs": 4})[0] == 0
    assert "fancy-new-flag = 11  # tuned by hand" in path.read_text()
    assert (
        restart.save_flags(path, "a", {"max-model-len": 2048})[0] == 1
    )  # the fake vLLM has no --max-model-len
    assert "a: flags.max-model-len: not a flag of vLLM 0.99.0" in capsys.readouterr().err
    assert "max-model-len" not in path.read_text()
