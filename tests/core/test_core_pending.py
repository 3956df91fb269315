"""The store of pending flag edits: set, replace, clear; secrets masked; bad input refused with a reason;
what a predecessor persisted taken back, bad entries left out and named."""

from __future__ import annotations

import json

import pytest

from vtui.core.masking import MASK
from vtui.core.pending import MAX_FLAGS, PendingEdits


def test_set_replace_clear_say_whether_anything_changed():
    edits = PendingEdits()
    assert not edits
    assert edits.set("qwen", {"max-num-seqs": 8, "enforce-eager": True}) is True
    assert edits.set("qwen", {"max-num-seqs": 8, "enforce-eager": True}) is False  # the same again
    assert edits.get("qwen") == {"max-num-seqs": 8, "enforce-eager": True}
    assert edits.set("qwen", {"max-num-seqs": 16}) is True  # the whole set, not merged
    assert edits.snapshot() == {"qwen": {"max-num-seqs": 16}}
    assert edits.set("qwen", None) is True
    assert edits.set("qwen", None) is False
    assert edits.get("qwen") is None and not edits


def test_snapshots_are_copies():
    edits = PendingEdits()
    edits.set("a", {"served-model-name": ["x", "y"]})
    snap = edits.snapshot()
    snap["a"]["served-model-name"].append("z")
    snap["a"]["dtype"] = "half"
    got = edits.get("a")
    assert got is not None
    got["dtype"] = "float"
    assert edits.get("a") == {"served-model-name": ["x", "y"]}


def test_secret_values_are_never_kept():
    edits = PendingEdits()
    edits.set("a", {"api-key": "s3cret", "max-num-seqs": 4})
    assert edits.get("a") == {"api-key": MASK, "max-num-seqs": 4}
    assert "s3cret" not in json.dumps(edits.snapshot())


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ([("max-num-seqs", 8)], "expected an object"),
        ({"--max-num-seqs": 8}, "not a flag name"),
        ({"": 1}, "not a flag name"),
        ({"max-num-seqs": {"nested": 1}}, "edits of a.max-num-seqs"),
        ({"x": [1, {"y": 2}]}, "not a flag value"),
        ({f"f{i}": 1 for i in range(MAX_FLAGS + 1)}, "at most"),
    ],
)
def test_bad_edits_are_refused_with_the_reason(flags, why):
    edits = PendingEdits()
    with pytest.raises(ValueError, match=why):
        edits.set("a", flags)
    assert not edits


def test_load_takes_what_was_persisted_and_names_what_it_left_out():
    old = PendingEdits()
    old.set("a", {"max-num-seqs": 8})
    old.set("b", {"api-key": "k", "dtype": "half"})
    data = json.loads(json.dumps(old.snapshot()))  # through the state file
    data["c"] = "not flags"
    new = PendingEdits()
    problems = new.load(data)
    assert new.snapshot() == {"a": {"max-num-seqs": 8}, "b": {"api-key": MASK, "dtype": "half"}}
    assert len(problems) == 1 and "edits of c" in problems[0]
    assert PendingEdits().load(None) == []
    assert "expected an object" in PendingEdits().load(["a"])[0]
