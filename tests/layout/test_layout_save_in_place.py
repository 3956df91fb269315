"""Saving into the file a layout came from changes only what differs: comments, key order, formatting
and untouched `${VAR}` strings survive; other targets get the full rewrite; nothing invalid is written."""

from __future__ import annotations

import difflib
import random
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest

from vtui.core.model import InstanceSpec
from vtui.layouts import LayoutError, SaveRefused, load_layout, render_layout, save_layout

COMMENTED = """\
# Two models on one box. Keep this header!
[session]
name = "box"   # shown in the title bar

[defaults]
model = "${VTUI_TEST_MODEL}"   # exported by the launcher script
max_restarts = 5
[defaults.flags]
max-model-len = 4096   # both fit in 4k

# --- the big one ---
[[instance]]
name = "big"
port = 8001
gpus = [0, 1]
env = { HF_TOKEN = "${VTUI_TEST_TOKEN}" }
[instance.flags]
tensor-parallel-size = 2
# tuned on 2025-01-02, see notes
max-num-seqs = 128   # more OOMs at 256
api-key = "${VTUI_TEST_KEY}"
enforce-eager = true

# --- the small one ---
[[instance]]
name = "small"
port = 8002
gpus = [2]
flags.max-num-seqs = 16   # dotted keys stay dotted
flags.seed = 7
"""

ENV = {"VTUI_TEST_MODEL": "org/model-8b", "VTUI_TEST_TOKEN": "hf_secret", "VTUI_TEST_KEY": "sk-secret"}


@pytest.fixture
def commented(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "box.toml"
    path.write_text(COMMENTED, encoding="utf-8")
    return path


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """(removed, added) lines between two texts."""
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    return [d[2:] for d in diff if d.startswith("- ")], [d[2:] for d in diff if d.startswith("+ ")]


def saved(path: Path, layout) -> str:
    save_layout(layout)
    text = path.read_text(encoding="utf-8")
    assert load_layout(path).instances == layout.instances
    return text


def test_a_flag_change_rewrites_only_that_value_and_keeps_its_comment(commented: Path) -> None:
    layout = load_layout(commented)
    edited = layout.replace_instance(layout.instance("big").with_flags({"max-num-seqs": 64}))
    text = saved(commented, edited)
    assert changed_lines(COMMENTED, text) == (
        ["max-num-seqs = 128   # more OOMs at 256"],
        ["max-num-seqs = 64   # more OOMs at 256"],
    )


def test_removed_and_added_flags_touch_only_their_lines(commented: Path) -> None:
    layout = load_layout(commented)
    big = layout.instance("big").with_flags({"gpu-memory-utilization": 0.85}, unset=["enforce-eager"])
    small = layout.instance("small").with_flags({"max-num-seqs": 32}, unset=["seed"])
    text = saved(commented, layout.replace_instance(big).replace_instance(small))
    removed, added = changed_lines(COMMENTED, text)
    assert sorted(removed) == sorted(
        ["enforce-eager = true", "flags.max-num-seqs = 16   # dotted keys stay dotted", "flags.seed = 7"]
    )
    assert sorted(added) == sorted(
        ["gpu-memory-utilization = 0.85", "flags.max-num-seqs = 32   # dotted keys stay dotted"]
    )


def test_var_references_survive_and_secrets_are_never_written(commented: Path) -> None:
    layout = load_layout(commented)
    big = layout.instance("big")
    assert big.flags["api-key"] == "sk-secret" and big.model == "org/model-8b"
    text = saved(commented, layout.replace_instance(big.with_flags({"max-num-seqs": 1})))
    for secret in ENV.values():
        assert secret not in text
    for line in (
        'model = "${VTUI_TEST_MODEL}"   # exported by the launcher script',
        'env = { HF_TOKEN = "${VTUI_TEST_TOKEN}" }',
        'api-key = "${VTUI_TEST_KEY}"',
    ):
        assert line in text.splitlines()
    # A new value for a ${VAR} key is written as given; the other references stay.
    text = saved(
        commented, load_layout(commented).replace_instance(big.with_flags({"api-key": "sk-typed-in"}))
    )
    assert 'api-key = "sk-typed-in"' in text and 'env = { HF_TOKEN = "${VTUI_TEST_TOKEN}" }' in text
    assert 'model = "${VTUI_TEST_MODEL}"   # exported by the launcher script' in text


def test_dropping_a_shared_default_flag_moves_it_to_the_instances_that_keep_it(commented: Path) -> None:
    layout = load_layout(commented)
    edited = layout.replace_instance(layout.instance("small").with_flags(unset=["max-model-len"]))
    text = saved(commented, edited)
    assert "max-model-len = 4096   # both fit in 4k" not in text
    assert load_layout(commented).instance("big").flags["max-model-len"] == 4096
    assert "max-model-len" not in load_layout(commented).instance("small").flags
    for keep in (
        "# Two models on one box. Keep this header!",
        "# --- the big one ---",
        "# --- the small one ---",
        "# tuned on 2025-01-02, see notes",
        'name = "box"   # shown in the title bar',
    ):
        assert keep in text


def test_an_added_instance_is_appended_and_a_removed_one_goes_alone(commented: Path) -> None:
    layout = load_layout(commented)
    extra = InstanceSpec(
        name="extra",
        model="org/model-8b",
        port=8003,
        engine="sim",
        gpus=(3,),
        flags={"max-model-len": 4096, "max-num-seqs": 8},
    )
    grown = replace(layout, instances=(*layout.instances, extra))
    text = saved(commented, grown)
    assert text.startswith(COMMENTED.rstrip("\n"))  # everything before is byte for byte the same
    assert text[len(COMMENTED.rstrip("\n")) :].lstrip("\n").startswith('[[instance]]\nname = "extra"')
    shrunk = replace(grown, instances=tuple(s for s in grown.instances if s.name != "small"))
    text = saved(commented, shrunk)
    assert 'name = "small"' not in text and "flags.seed" not in text
    assert "# Two models on one box. Keep this header!" in text and "# tuned on 2025-01-02, see notes" in text


def test_save_as_to_a_new_path_is_the_full_rewrite(commented: Path, tmp_path: Path) -> None:
    layout = load_layout(commented)
    other = tmp_path / "other.toml"
    save_layout(replace(layout, path=other), other)
    text = other.read_text(encoding="utf-8")
    assert "#" not in text and load_layout(other).instances == layout.instances
    save_layout(layout, tmp_path / "copy.toml")  # the layout still names its own file: also a rewrite
    assert "#" not in (tmp_path / "copy.toml").read_text(encoding="utf-8")
    assert commented.read_text(encoding="utf-8") == COMMENTED


def test_reordered_instances_are_set_aside_not_rewritten_over_the_comments(commented: Path) -> None:
    layout = load_layout(commented)
    swapped = replace(layout, instances=tuple(reversed(layout.instances)))
    with pytest.raises(SaveRefused, match="reordered") as caught:
        save_layout(swapped)
    aside = commented.with_name("box.toml.new")
    assert commented.read_text(encoding="utf-8") == COMMENTED  # the user's file, untouched
    assert str(commented) in str(caught.value) and str(aside) in str(caught.value)
    assert load_layout(aside).names() == ["small", "big"]


def test_a_key_added_by_hand_since_the_read_is_kept(commented: Path) -> None:
    layout = load_layout(commented)  # the dashboard's copy, read at start
    by_hand = COMMENTED.replace("gpus = [2]\n", "gpus = [2]\nmax_restarts = 9   # added by hand\n")
    by_hand = by_hand.replace("enforce-eager = true\n", "enforce-eager = true\nseed = 3   # by hand too\n")
    commented.write_text(by_hand, encoding="utf-8")
    edited = layout.replace_instance(layout.instance("big").with_flags({"max-num-seqs": 64}))
    text = saved_as_merged(commented, edited)
    assert "max_restarts = 9   # added by hand" in text and "seed = 3   # by hand too" in text
    assert changed_lines(by_hand, text) == (
        ["max-num-seqs = 128   # more OOMs at 256"],
        ["max-num-seqs = 64   # more OOMs at 256"],
    )
    saved_layout = load_layout(commented)
    assert saved_layout.instance("small").restart.max_restarts == 9
    assert (
        saved_layout.instance("big").flags["seed"] == 3
        and saved_layout.instance("big").flags["max-num-seqs"] == 64
    )


def test_an_instance_added_by_hand_since_the_read_is_kept(commented: Path) -> None:
    layout = load_layout(commented)
    by_hand = COMMENTED + '\n[[instance]]\nname = "third"   # by hand\nport = 8009\ngpus = [5]\n'
    commented.write_text(by_hand, encoding="utf-8")
    text = saved_as_merged(
        commented, layout.replace_instance(layout.instance("small").with_flags({"seed": 8}))
    )
    assert 'name = "third"   # by hand' in text and load_layout(commented).names() == [
        "big",
        "small",
        "third",
    ]


def test_a_value_changed_on_both_sides_is_refused_and_named(commented: Path) -> None:
    layout = load_layout(commented)
    by_hand = COMMENTED.replace("max-num-seqs = 128   # more OOMs at 256", "max-num-seqs = 96")
    commented.write_text(by_hand, encoding="utf-8")
    with pytest.raises(SaveRefused, match=r"changed on disk.*instance\[big\]\.flags\.max-num-seqs"):
        save_layout(layout.replace_instance(layout.instance("big").with_flags({"max-num-seqs": 64})))
    assert commented.read_text(encoding="utf-8") == by_hand


def test_a_file_that_no_longer_loads_is_not_overwritten(commented: Path) -> None:
    layout = load_layout(commented)
    broken = COMMENTED + "\n[[instance]]\nname = \n"
    commented.write_text(broken, encoding="utf-8")
    with pytest.raises(SaveRefused, match="no longer loads"):
        save_layout(layout.replace_instance(layout.instance("big").with_flags({"max-num-seqs": 64})))
    assert commented.read_text(encoding="utf-8") == broken
    assert load_layout(commented.with_name("box.toml.new")).instance("big").flags["max-num-seqs"] == 64


def test_an_editor_failure_refuses_instead_of_rewriting_without_comments(commented: Path) -> None:
    """Was: tomlkit 0.15 removed a private method the editor called; the AttributeError was swallowed and
    the save rewrote the file without a comment, saying "saved"."""
    layout = load_layout(commented)
    edited = layout.replace_instance(layout.instance("big").with_flags({"gpu-memory-utilization": 0.8}))
    with mock.patch("vtui.layouts.edit._moved", side_effect=AttributeError("no _insert_after")):
        with pytest.raises(SaveRefused, match="in-place editor failed: AttributeError"):
            save_layout(edited)
    assert commented.read_text(encoding="utf-8") == COMMENTED
    text = saved(commented, edited)  # and without the fault: every comment kept
    assert all(line in text.splitlines() for line in COMMENTED.splitlines() if line.lstrip().startswith("#"))


def saved_as_merged(path: Path, layout) -> str:
    save_layout(layout)
    return path.read_text(encoding="utf-8")


def test_a_result_that_would_not_load_is_never_written(commented: Path, tmp_path: Path) -> None:
    layout = load_layout(commented)
    bad = layout.replace_instance(layout.instance("big").with_flags({"max-num-seqs": "many"}))
    with pytest.raises(LayoutError) as caught:
        save_layout(bad)
    assert commented.read_text(encoding="utf-8") == COMMENTED
    assert [p.key for p in caught.value.problems] == ["instance[0].flags.max-num-seqs"]
    assert str(caught.value).startswith(f"{commented} (not saved):")
    new = tmp_path / "new.toml"
    with pytest.raises(LayoutError):
        save_layout(replace(bad, path=new), new)
    assert not new.exists()
    with pytest.raises(LayoutError):
        render_layout(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["box.toml"]  # no temp file left either


def test_random_flag_edits_round_trip_and_keep_every_comment(commented: Path) -> None:
    rng = random.Random(7)
    comments = [
        line
        for line in COMMENTED.splitlines()
        if "#" in line
        and "max-num-seqs" not in line
        and "flags.seed" not in line
        and "enforce-eager" not in line
    ]
    for _ in range(25):
        layout = load_layout(commented)
        name = rng.choice(layout.names())
        spec = layout.instance(name)
        sets = {"max-num-seqs": rng.randint(1, 512)} if rng.random() < 0.7 else {}
        if rng.random() < 0.5:
            sets["block-size"] = rng.choice([16, 32])
        unset = [f for f in ("seed", "enforce-eager", "block-size") if rng.random() < 0.3]
        edited = layout.replace_instance(spec.with_flags(sets, unset))
        text = saved(commented, edited)
        assert [c for c in comments if c not in text] == []


def test_start_timeout_is_written_only_when_not_the_default(commented: Path, tmp_path: Path) -> None:
    layout = load_layout(commented)
    big = layout.instance("big")
    assert big.restart.start_timeout == 1800
    edited = layout.replace_instance(replace(big, restart=replace(big.restart, start_timeout=0.0)))
    text = saved(commented, edited)
    assert changed_lines(COMMENTED, text) == ([], ["start_timeout = 0.0"])
    other = tmp_path / "other.toml"
    save_layout(replace(edited, path=other), other)
    assert other.read_text(encoding="utf-8").count("start_timeout") == 1
    assert load_layout(other).instance("big").restart.start_timeout == 0
