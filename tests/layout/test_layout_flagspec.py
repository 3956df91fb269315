"""The built-in vllm serve 0.32 flag table, value validation and did-you-mean."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from vtui.core import flagspec, servehelp
from vtui.core.flagspec import BUILTIN_FLAGS, SEED_FLAGS, parse_flag_value, suggest, validate_flag

ROOT = Path(__file__).resolve().parents[2]


def test_every_option_of_the_help_is_in_the_table() -> None:
    help_text = flagspec.HELP_FILE.read_text(encoding="utf-8")
    option_lines = [line for line in help_text.splitlines() if line.startswith("  -")]
    assert len(option_lines) == 317  # the README's count, -h/--help included
    assert len(BUILTIN_FLAGS) == 316  # everything but --help
    assert flagspec.VLLM_VERSION == "0.32.0"


def test_data_file_is_regenerated_from_the_bundled_help() -> None:
    spec = importlib.util.spec_from_file_location("gen_flagspec", ROOT / "scripts" / "gen_flagspec.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "vllm_serve_flags.json is stale: run scripts/gen_flagspec.py"


@pytest.mark.parametrize(
    ("name", "kind", "default", "aliases"),
    [
        ("tensor-parallel-size", "int", 1, ("-tp",)),
        ("pipeline-parallel-size", "int", 1, ("-pp",)),
        ("gpu-memory-utilization", "float", 0.92, ("--device-memory-utilization",)),
        ("max-num-seqs", "int", None, ()),
        ("max-model-len", "int", None, ()),
        ("enforce-eager", "bool", False, ()),
        ("enable-prefix-caching", "bool", None, ()),
        ("data-parallel-multi-port-external-lb", "bool", False, ("-dpm",)),
        ("served-model-name", "list", None, ()),
        ("api-key", "list", None, ()),
        ("compilation-config", "json", None, ("-cc",)),
        ("allowed-origins", "json", [], ()),
        ("quantization", "str", None, ("-q",)),
        ("port", "int", 8000, ()),
    ],
)
def test_types_defaults_and_aliases(name: str, kind: str, default: object, aliases: tuple) -> None:
    spec = BUILTIN_FLAGS[name]
    assert spec.type == kind
    assert spec.aliases == aliases
    if name != "compilation-config":
        assert spec.default == default
    assert spec.help and "(default:" not in spec.help


def test_choices_and_human_sizes() -> None:
    assert BUILTIN_FLAGS["dtype"].choices == ("auto", "bfloat16", "float", "float16", "float32", "half")
    assert "fp8" in (BUILTIN_FLAGS["kv-cache-dtype"].choices or ())
    assert BUILTIN_FLAGS["max-lora-rank"].type == "int"
    assert BUILTIN_FLAGS["tool-call-parser"].choices is None  # "or name registered in --tool-parser-plugin"
    assert BUILTIN_FLAGS["kv-cache-memory-bytes"].human
    assert BUILTIN_FLAGS["hf-token"].optional_value
    assert BUILTIN_FLAGS["block-size"].group == "CacheConfig"


def test_seed_flags_are_real_flags() -> None:
    assert SEED_FLAGS[:4] == (
        "gpu-memory-utilization",
        "max-model-len",
        "max-num-seqs",
        "max-num-batched-tokens",
    )
    assert "kv-cache-memory-bytes" in SEED_FLAGS
    assert "swap-space" not in SEED_FLAGS  # gone from vLLM 0.32
    assert all(name in BUILTIN_FLAGS for name in SEED_FLAGS)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("max-num-seqs", "many", 'expected an integer, got "many"'),
        ("max-num-seqs", 8.5, "expected an integer, got 8.5"),
        ("max-num-seqs", True, "expected an integer, got true"),
        ("max-num-seqs", 0, "must be at least 1, got 0"),
        ("gpu-memory-utilization", 0, "must be a fraction in (0, 1], got 0"),
        ("gpu-memory-utilization", 1.01, "must be a fraction in (0, 1], got 1.01"),
        ("gpu-memory-utilization", "0.9", 'expected a number, got "0.9"'),
        ("enforce-eager", 1, "expected true or false, got 1"),
        ("dtype", "fp32", "expected one of auto, bfloat16, float, float16, float32, half"),
        ("kv-cache-memory-bytes", "lots", 'expected an integer or a size like "64M", got "lots"'),
        ("max-model-len", -2, "must be a positive length (or -1 for auto), got -2"),
        ("max-logprobs", -2, "must be at least 0 (or -1 for no cap), got -2"),
        ("quantization", False, "expected a string, got false"),
        ("collect-detailed-traces", ["all", "nope"], "expected one of all, model, worker, None"),
        ("compilation-config", "{oops", "invalid JSON"),
        ("max-num-sqes", 8, 'unknown flag; did you mean "max-num-seqs"?'),
    ],
)
def test_validate_flag_rejects(name: str, value: object, message: str) -> None:
    problem = validate_flag(name, value)
    assert problem is not None and message in problem, problem


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max-num-seqs", 256),
        ("gpu-memory-utilization", 1),
        ("gpu-memory-utilization", 0.92),
        ("kv-cache-memory-bytes", "64M"),
        ("kv-cache-memory-bytes", 1 << 30),
        ("kv-cache-memory-bytes", "25.6k"),
        ("max-model-len", "auto"),
        ("max-model-len", -1),
        ("max-model-len", "8k"),
        ("enforce-eager", False),
        ("served-model-name", "qwen3"),
        ("served-model-name", ["a", "b"]),
        ("api-key", "${KEY}"),
        ("compilation-config", {"mode": 3}),
        ("compilation-config", '{"mode": 3}'),
        ("dtype", "float32"),
        ("max-lora-rank", 64),
        ("hf-token", True),
        ("hf-token", "hf_x"),
        ("seed", 7),
        ("max-logprobs", -1),  # vLLM: no cap (ModelConfig.max_logprobs, ge=-1)
        ("max-logprobs", 0),
    ],
)
def test_validate_flag_accepts(name: str, value: object) -> None:
    assert validate_flag(name, value) is None


def test_human_int_follows_vllm() -> None:
    assert flagspec.human_int("1k") == 1000
    assert flagspec.human_int("1K") == 1024
    assert flagspec.human_int("25.6k") == 25600
    assert flagspec.human_int("64M") == 64 * 2**20
    assert flagspec.human_int("64Q") is None


@pytest.mark.parametrize(
    ("text_name", "text", "expected"),
    [
        ("max-num-seqs", "128", 128),
        ("gpu-memory-utilization", "0.9", 0.9),
        ("enforce-eager", "true", True),
        ("enforce-eager", "off", False),
        ("kv-cache-memory-bytes", "64M", "64M"),
        ("dtype", "half", "half"),
        ("served-model-name", "a, b", ["a", "b"]),
        ("tp", "2", 2),
        ("--max-model-len", "auto", "auto"),
    ],
)
def test_parse_flag_value(text_name: str, text: str, expected: object) -> None:
    assert parse_flag_value(text_name, text) == expected


def test_parse_flag_value_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match='max-num-seqs: expected an integer, got "many"'):
        parse_flag_value("max-num-seqs", "many")
    with pytest.raises(ValueError, match='unknown flag "max-num-sqes"; did you mean "max-num-seqs"'):
        parse_flag_value("max-num-sqes", "8")


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("max_num_seqs", "max-num-seqs"),
        ("gpu-memory-utilisation", "gpu-memory-utilization"),
        ("tp", "tensor-parallel-size"),
        ("no-enforce-eager", "enforce-eager"),
        ("enforce-eagre", "enforce-eager"),
        ("zzzzzz", None),
    ],
)
def test_suggest(typed: str, expected: str | None) -> None:
    assert suggest(typed) == expected


def test_parse_serve_help_reads_argparse_layouts() -> None:
    text = """usage: vllm serve [model_tag] [options]

options:
  --alpha ALPHA, -a ALPHA
                        Alpha value. (default: 3)
  --beta, --no-beta     Beta switch. (default: True)
  --gamma {x,y}         Pick one. (default: x)
  --delta DELTA [DELTA ...]
                        Several. (default: None)

CacheConfig:
  Cache things.

  --eps EPS             Epsilon. Should either be a valid JSON string or JSON
                        keys passed individually. (default: {})
"""
    specs = servehelp.parse_serve_help(text)
    assert set(specs) == {"alpha", "beta", "gamma", "delta", "eps"}
    assert (specs["alpha"].type, specs["alpha"].default, specs["alpha"].aliases) == ("int", 3, ("-a",))
    assert (specs["beta"].type, specs["beta"].default) == ("bool", True)
    assert (specs["gamma"].choices, specs["gamma"].default) == (("x", "y"), "x")
    assert specs["delta"].type == "list"
    assert (specs["eps"].type, specs["eps"].group) == ("json", "CacheConfig")


def test_sim_flags_agree_with_the_sim_parser() -> None:
    sim_args = pytest.importorskip("vtui.sim.args")
    parser = sim_args.build_parser()
    kinds = {int: "int", float: "float", None: "str", str: "str"}
    sim_actions = {
        a.option_strings[0][2:]: a
        for a in parser._actions
        if a.option_strings and a.option_strings[0].startswith("--sim-")
    }
    assert set(sim_actions) == set(flagspec.SIM_FLAGS)
    for name, action in sim_actions.items():
        spec = flagspec.SIM_FLAGS[name]
        expected = "bool" if action.nargs == 0 else kinds[action.type]
        assert spec.type == expected, name
        assert spec.default == action.default, name
        assert spec.choices == (tuple(action.choices) if action.choices else None), name


def test_sim_flags_validate_and_parse() -> None:
    assert validate_flag("sim-load", 4) is None
    assert validate_flag("sim-load", "x") == 'expected an integer, got "x"'
    assert parse_flag_value("sim-startup-scale", "0") == 0.0
    assert "sim-load" not in BUILTIN_FLAGS  # BUILTIN_FLAGS is vLLM's own table
