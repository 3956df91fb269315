"""One parser of vLLM's human-readable integers (`core.flagspec.parse_human_int`), and every place that
used to have its own answer gives vLLM's: flagspec's validator, `vtui plan`'s options, the flag editor's
planner inputs (ui/planning) and the simulated engine's command line.

The expected values are vLLM's own `human_readable_int` (vllm/utils/argparse_utils.py): lower-case
suffixes are decimal and take decimals (truncated: int(float(n) * 1000)), upper-case ones are binary and
take whole numbers only, anything else goes through int().
"""

from __future__ import annotations

import argparse

import pytest

from vtui.commands import plan as plan_cmd
from vtui.core import flagspec
from vtui.core.flagspec import int_flag
from vtui.sim import args as simargs

CASES: list[tuple[str, int | None]] = [
    ("1k", 1000),
    ("1K", 1024),
    ("25.6k", 25_600),
    ("1.5k", 1500),
    ("2.01k", 2009),  # vLLM truncates the float product 2009.999...
    ("64M", 64 * 2**20),
    ("64m", 64 * 10**6),
    ("2G", 2 * 2**30),
    ("2g", 2 * 10**9),
    ("1T", 2**40),
    ("1t", 10**12),
    (" 8192 ", 8192),
    ("1048576", 1_048_576),
    ("1.5", None),  # the CLI's old parser said 1
    ("1.5K", None),  # decimals only with decimal suffixes (the old parsers said 1536)
    ("2GiB", None),
    ("2 G", None),
    ("1e3", None),
    ("lots", None),
    ("", None),
]


def _plan_option(text: str) -> int | None:
    parser = argparse.ArgumentParser()
    plan_cmd.add_arguments(parser)
    parser.error = lambda message: (_ for _ in ()).throw(ValueError(message))  # type: ignore[method-assign]
    try:
        return parser.parse_args(["m", "--kv-memory-bytes", text]).kv_memory_bytes
    except ValueError:
        return None


def _sim_option(text: str) -> int | None:
    try:
        return simargs.human_int(text)
    except argparse.ArgumentTypeError:
        return None


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_every_caller_gives_vllms_answer(text: str, expected: int | None) -> None:
    assert flagspec.human_int(text) == expected
    assert _plan_option(text) == expected
    assert int_flag(text) == expected  # the flag editor's, the planner's, the replicas' and the sim's reader
    assert _sim_option(text) == expected
    accepted = flagspec.validate_flag("max-num-batched-tokens", text) is None
    assert accepted == (expected is not None)


def test_rejections_say_why() -> None:
    with pytest.raises(ValueError, match="did you mean 1.5k"):
        flagspec.parse_human_int("1.5K")
    with pytest.raises(argparse.ArgumentTypeError, match="2GiB"):
        flagspec.human_int_arg("2GiB")


def test_max_model_len_takes_auto_like_vllm() -> None:
    for text in ("auto", "AUTO", "-1", "32k"):
        assert flagspec.validate_flag("max-model-len", text) is None
    assert flagspec.validate_flag("max-model-len", "1.5") is not None
