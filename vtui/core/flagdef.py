"""`FlagSpec`, the record of one `vllm serve` flag, and `inverse_switch` (vLLM 0.33's other spelling of
a switch): what both the flag tables (`core.flagtable`) and the help parser (`core.servehelp`) build
on, so neither imports the other's caller (the tables parse the bundled help when their data file is
missing; the parser makes `FlagSpec`s)."""

from __future__ import annotations

from dataclasses import dataclass

FLAG_TYPES = ("int", "float", "str", "bool", "list", "json")


@dataclass(frozen=True)
class FlagSpec:
    name: str  # canonical long name without dashes: "tensor-parallel-size"
    type: str  # one of FLAG_TYPES; "list" = several values (nargs), "json" = a JSON object/string
    choices: tuple[str, ...] | None = None  # allowed values as text (for a list: each item's)
    default: object = None
    help: str = ""
    aliases: tuple[str, ...] = ()  # as written in the help, dashes included: ("-tp",)
    group: str = ""  # the help section ("CacheConfig", "Frontend", …)
    human: bool = False  # an int that also takes "64M", "1k", "25.6k"
    optional_value: bool = False  # `--hf-token [HF_TOKEN]`: a bare flag (true) is allowed too
    negatable: bool = False  # a bool with a `--no-x` form; a plain switch can only be turned on


def inverse_switch(name: str) -> str | None:
    """vLLM 0.33's other spelling of an `--enable-x` / `--disable-x` switch (`EnableDisableAction` in
    vllm/utils/argparse_utils.py pairs them; `--no-x` stays accepted but leaves the help): the name
    that sets it False. None for any other flag."""
    for prefix, other in (("enable-", "disable-"), ("disable-", "enable-")):
        if name.startswith(prefix):
            return other + name[len(prefix) :]
    return None
