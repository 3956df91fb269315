"""The store of pending flag edits: set, replace, clear; secrets masked; bad input refused with a reason;
what a predecessor persisted taken back, bad entries left out and named."""

from __future__ import annotations

import json

import pytest

from vtui.core.masking import MASK
from vtui.core.pending import MAX_FLAGS, FlagConflict, PendingEdits, rebase


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


# -- rebase: a kept edit when the applied flags change under it -------------------------------------------


def test_rebase_keeps_only_the_users_changes_on_the_new_flags():
    base = {"max-num-seqs": 8, "dtype": "auto", "enforce-eager": True, "max-model-len": 4096}
    edit = {
        "max-num-seqs": 16,
        "dtype": "auto",
        "max-model-len": 4096,
        "kv-cache-dtype": "fp8",
    }  # unset eager
    onto = {"max-num-seqs": 8, "dtype": "half", "enforce-eager": True, "max-model-len": 4096, "seed": 1}
    done = rebase(edit, base, onto)
    # the other client's dtype and seed stay; the user's max-num-seqs, kv-cache-dtype and unset stay
    assert done.flags == {
        "max-num-seqs": 16,
        "dtype": "half",
        "max-model-len": 4096,
        "seed": 1,
        "kv-cache-dtype": "fp8",
    }
    assert done.conflicts == ()


def test_a_flag_both_changed_keeps_the_users_value_and_is_a_conflict():
    base = {"max-num-seqs": 8, "max-model-len": 4096, "enforce-eager": True}
    edit = {"max-num-seqs": 16, "max-model-len": 2048}  # and eager unset
    onto = {"max-num-seqs": 32, "max-model-len": 2048, "enforce-eager": False}  # the same 2048: agreed
    done = rebase(edit, base, onto)
    assert done.flags == {"max-num-seqs": 16, "max-model-len": 2048}
    assert done.conflicts == (
        FlagConflict("enforce-eager", None, False, True),
        FlagConflict("max-num-seqs", 16, 32, 8),
    )
    assert "--max-num-seqs: your 16 kept" in done.conflicts[1].text() and "32" in done.conflicts[1].text()
    assert "your unset kept" in done.conflicts[0].text()


def test_a_kept_edit_is_rebased_and_says_so_once():
    changed: list[str] = []
    edits = PendingEdits(on_change=changed.append)
    edits.set("a", {"max-num-seqs": 16, "dtype": "auto"}, base={"max-num-seqs": 8, "dtype": "auto"})
    assert changed == ["a"]
    assert edits.rebase("a", {"max-num-seqs": 8, "dtype": "auto"}) is False  # its own base: nothing to do
    assert edits.rebase("a", {"max-num-seqs": 32, "dtype": "half"}) is True
    assert edits.get("a") == {"max-num-seqs": 16, "dtype": "half"}  # not a revert of dtype
    assert edits.base("a") == {"max-num-seqs": 32, "dtype": "half"}
    assert edits.conflicts("a") == (FlagConflict("max-num-seqs", 16, 32, 8),)
    assert edits.conflicts_snapshot() == {"a": (FlagConflict("max-num-seqs", 16, 32, 8),)}
    assert changed == ["a", "a"]
    # the user types on, keeping 16: the conflict stays; types the other's value: it is gone
    edits.set(
        "a", {"max-num-seqs": 16, "dtype": "half", "seed": 3}, base={"max-num-seqs": 32, "dtype": "half"}
    )
    assert edits.conflicts("a") == (FlagConflict("max-num-seqs", 16, 32, 8),)
    edits.set(
        "a", {"max-num-seqs": 32, "dtype": "half", "seed": 3}, base={"max-num-seqs": 32, "dtype": "half"}
    )
    assert edits.conflicts("a") == ()


def test_an_edit_the_new_flags_already_hold_is_dropped():
    edits = PendingEdits()
    edits.set("a", {"max-num-seqs": 16}, base={"max-num-seqs": 8})
    assert edits.rebase("a", {"max-num-seqs": 16}) is True  # applied (by this client or another)
    assert edits.get("a") is None and not edits


def test_a_secret_in_the_applied_flags_is_never_kept_by_a_rebase():
    edits = PendingEdits()
    edits.set("a", {"max-num-seqs": 16, "api-key": "old"}, base={"max-num-seqs": 8, "api-key": "old"})
    edits.rebase("a", {"max-num-seqs": 8, "api-key": "n3w", "dtype": "half"})
    assert edits.get("a") == {"max-num-seqs": 16, "api-key": MASK, "dtype": "half"}
    assert "n3w" not in json.dumps(edits.state()) and "old" not in json.dumps(edits.state())


def test_the_base_and_conflicts_are_persisted_and_an_older_state_still_loads():
    old = PendingEdits()
    old.set("a", {"max-num-seqs": 16}, base={"max-num-seqs": 8})
    old.rebase("a", {"max-num-seqs": 32})
    told: list[str] = []
    new = PendingEdits(on_change=told.append)
    assert new.load(json.loads(json.dumps(old.state()))) == []
    assert told == []  # a load is no change to broadcast
    assert new.get("a") == {"max-num-seqs": 16} and new.base("a") == {"max-num-seqs": 32}
    assert new.conflicts("a") == (FlagConflict("max-num-seqs", 16, 32, 8),)
    assert new.rebase("a", {"max-num-seqs": 16}) is True and new.get("a") is None  # and rebases on
    older = PendingEdits()
    assert older.load({"a": {"max-num-seqs": 16}}) == []  # edits alone: kept, with no base to rebase from
    assert older.get("a") == {"max-num-seqs": 16} and older.rebase("a", {"max-num-seqs": 32}) is False
    bad = PendingEdits()
    problems = bad.load({"a": {"flags": {"x": 1}, "conflicts": [{"flag": "x", "mine": {"no": 1}}]}})
    assert len(problems) == 1 and "conflict of --x" in problems[0]


async def test_the_supervisor_rebases_a_kept_edit_when_a_new_layout_changes_the_flags():
    """A layout re-read (`vtui up` of an edited file) gives a stopped instance other flags: the kept edit
    keeps only its own change on them; an edit sent from flags older than those is rebased at once."""
    from vtui.core.model import InstanceSpec, Layout, SessionSpec
    from vtui.supervisor.supervisor import Supervisor

    def layout(**flags: object) -> Layout:
        return Layout(SessionSpec(name="s"), (InstanceSpec("a", "m", 8000, flags=flags),))

    sup = Supervisor(layout(**{"max-num-seqs": 8, "max-model-len": 4096}), check_preflight=False)
    told: list[str] = []
    sup.edits.on_change = told.append
    await sup.set_pending("a", {"max-num-seqs": 16, "max-model-len": 4096})  # made from the flags it has
    sup.set_layout(layout(**{"max-num-seqs": 8, "max-model-len": 2048, "seed": 1}))
    assert sup.pending_edits() == {"a": {"max-num-seqs": 16, "max-model-len": 2048, "seed": 1}}
    assert sup.pending_conflicts() == {} and told == ["a", "a"]
    await sup.set_pending(
        "a", {"max-num-seqs": 4, "max-model-len": 4096}, base={"max-num-seqs": 8, "max-model-len": 4096}
    )
    assert sup.pending_edits() == {"a": {"max-num-seqs": 4, "max-model-len": 2048, "seed": 1}}
    with pytest.raises(KeyError):
        await sup.set_pending("nope", {"x": 1})
    await sup.close()
