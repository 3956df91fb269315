"""The built-in schema of `vllm serve` flags (0.32), so layouts are checked before anything launches.

`BUILTIN_FLAGS` is loaded from `vllm_serve_flags.json`, which `scripts/gen_flagspec.py` builds from the
real `vllm serve --help=all` (kept in `vtui/core/data/`) with `parse_serve_help`; the telemetry
package reuses that parser on the installed vLLM's help. Validation messages are written to be shown
after a dotted key: `instance[2].flags.max-num-seqs: expected an integer, got "many"`.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType

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


# -- parsing `vllm serve --help=all` --------------------------------------------------------------

_SPLIT_NAMES = re.compile(r",\s+(?=-)")
_DEFAULT = re.compile(
    r"\(default:\s*((?:(?!\(default:).)*)\)\s*$", re.S
)  # the last one: help may quote another
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
# Flags whose help says "(default: None)" and nothing else about their type.
_INT_FLAGS = frozenset(
    {
        "api-server-count",
        "block-size",
        "cp-kv-cache-interleave-size",
        "cpu-distributed-timeout-seconds",
        "data-parallel-rank",
        "data-parallel-rpc-port",
        "data-parallel-size",
        "data-parallel-size-local",
        "data-parallel-start-rank",
        "dcp-kv-cache-interleave-size",
        "decode-context-parallel-size",
        "distributed-timeout-seconds",
        "dp-supervisor-probe-failure-threshold",
        "elastic-ep-max-dp-size",
        "grpc-port",
        "h11-max-header-count",
        "h11-max-incomplete-event-size",
        "mamba-block-size",
        "mamba-cache-philox-rounds",
        "master-port",
        "max-cpu-loras",
        "max-cudagraph-capture-size",
        "max-log-len",
        "max-logprobs",
        "max-lora-cls-labels",
        "max-loras",
        "max-num-active-seqs",
        "max-num-queued-reqs",
        "max-num-seqs",
        "max-parallel-loading-workers",
        "nnodes",
        "node-rank",
        "num-gpu-blocks-override",
        "offload-group-size",
        "offload-num-in-group",
        "offload-prefetch-step",
        "pipeline-parallel-size",
        "port",
        "prefill-context-parallel-size",
        "prefill-schedule-interval",
        "prefix-match-unit",
        "renderer-num-workers",
        "replayssm-buffer-len",
        "seed",
        "spec-tokens",
        "stream-interval",
        "tensor-parallel-size",
        "ubatch-size",
        "dbo-decode-token-threshold",
        "dbo-prefill-token-threshold",
        "dp-sync-interval",
        "optimization-level",
        "shutdown-timeout",
        "long-prefill-token-threshold",
        "max-num-queued-tokens",
        "max-num-scheduled-tokens",
        "safetensors-prefetch-num-threads",
        "mm-shm-cache-max-object-size-mb",
    }
)
_FLOAT_FLAGS = frozenset(
    {
        "gpu-memory-utilization",
        "kv-offloading-size",
        "cpu-offload-gb",
        "mm-processor-cache-gb",
        "mm-ipc-gpu-memory-gb",
        "video-pruning-rate",
        "sse-keep-alive-interval",
        "watermark",
        "dp-supervisor-probe-interval-s",
        "dp-supervisor-probe-timeout-s",
        "prefix-cache-retention-interval",
        "mm-encoder-fp8-scale-save-margin",
        "swap-space",
        "kv-cache-metrics-sample",
    }
)


def _literal(text: str) -> object:
    text = text.strip()
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    if isinstance(value, (tuple, set, frozenset)):
        value = list(value)
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return text
    return value


def _choices(text: str) -> tuple[str, ...] | None:
    text = text.strip()
    if text.startswith("{") and "}" in text:
        return tuple(c for c in text[1 : text.index("}")].split(","))
    if text.startswith("['"):
        value = _literal(text[: text.index("]") + 1])
        if isinstance(value, list):
            return tuple(str(v) for v in value)
    return None


def inverse_switch(name: str) -> str | None:
    """vLLM 0.33's other spelling of an `--enable-x` / `--disable-x` switch (`EnableDisableAction` in
    vllm/utils/argparse_utils.py pairs them; `--no-x` stays accepted but leaves the help): the name
    that sets it False. None for any other flag."""
    for prefix, other in (("enable-", "disable-"), ("disable-", "enable-")):
        if name.startswith(prefix):
            return other + name[len(prefix) :]
    return None


def _spec_from_block(signature: str, help_lines: list[str], group: str) -> FlagSpec | None:
    parts = _SPLIT_NAMES.split(signature.strip())
    names = [p.split(" ", 1)[0] for p in parts]
    longs = [n for n in names if n.startswith("--")]
    if not longs or "--help" in names:
        return None
    name = longs[0][2:]
    rest = parts[0].split(" ", 1)[1] if " " in parts[0] else ""
    inverse = inverse_switch(name)
    negations = {f"--no-{name}", *((f"--{inverse}",) if inverse and not rest else ())}
    negatable = any(n in negations for n in names)
    aliases = tuple(n for n in names if n != longs[0] and n not in negations)
    text = "\n".join(help_lines).strip()
    default: object = None
    match = _DEFAULT.search(text)
    if match:
        default = _literal(" ".join(match.group(1).split()))
        text = text[: match.start()].rstrip()
    open_choices = " or name registered" in rest
    choices = None if open_choices else _choices(rest)
    flat = " ".join(text.split())
    human = "human-readable integers" in flat
    optional_value = rest.startswith("[") and rest.endswith("]") and not rest.startswith("['")
    if not rest or negatable:
        kind = "bool"
    elif re.search(r"\s\[\S+ \.\.\.\]$", rest):
        kind = "list"
    elif choices is not None:
        kind = "int" if all(_NUMBER.match(c) for c in choices) else "str"
    elif "valid JSON string" in flat:
        kind = "json"
    elif human or name in _INT_FLAGS:
        kind = "int"
    elif name in _FLOAT_FLAGS:
        kind = "float"
    elif isinstance(default, bool):
        kind = "bool"
    elif isinstance(default, int):
        kind = "int"
    elif isinstance(default, float):
        kind = "float"
    elif isinstance(default, (list, dict)):
        kind = "json"
    else:
        kind = "str"
    return FlagSpec(
        name=name,
        type=kind,
        choices=choices,
        default=default,
        help=text,
        aliases=aliases,
        group=group,
        human=human,
        optional_value=optional_value,
        negatable=negatable,
    )


def parse_serve_help(text: str) -> dict[str, FlagSpec]:
    """Every option of a `vllm serve --help=all` text, by canonical name (argparse's layout)."""
    flags: dict[str, FlagSpec] = {}
    group = "options"
    signature: str | None = None
    help_lines: list[str] = []

    def flush() -> None:
        if signature is not None:
            spec = _spec_from_block(signature, help_lines, group)
            if spec is not None:
                flags[spec.name] = spec

    for line in text.splitlines():
        if line.startswith("  -"):
            flush()
            head, _, first_help = line[2:].partition("  ")
            signature, help_lines = head, ([first_help.strip()] if first_help.strip() else [])
        elif line.startswith("    ") and signature is not None:
            help_lines.append(line[24:] if line[:24].isspace() else line.strip())
        elif line and not line.startswith(" ") and line.rstrip().endswith(":"):
            flush()
            signature, group = None, line.rstrip()[:-1]
        elif line.strip() and signature is not None and not line.startswith("    "):
            flush()
            signature = None
    flush()
    return flags


# -- the built-in table -----------------------------------------------------------------------------

DATA_FILE = Path(__file__).with_name("vllm_serve_flags.json")


HELP_FILE = Path(__file__).with_name("data") / "serve_help_0_32.txt"


def _load_data() -> dict:
    """The generated table; before it exists (first run of the generator) the bundled help, parsed."""
    if DATA_FILE.exists():
        return json.loads(DATA_FILE.read_text(encoding="utf-8"))
    specs = parse_serve_help(HELP_FILE.read_text(encoding="utf-8")) if HELP_FILE.exists() else {}
    return json.loads(specs_to_json(specs, "0.32.0", HELP_FILE.name))


def _load_builtin(data: dict) -> Mapping[str, FlagSpec]:
    specs = {}
    for item in data["flags"]:
        item = dict(item)
        item["aliases"] = tuple(item.get("aliases") or ())
        item["choices"] = tuple(item["choices"]) if item.get("choices") is not None else None
        specs[item["name"]] = FlagSpec(**item)
    return MappingProxyType(specs)


def specs_to_json(specs: Mapping[str, FlagSpec], version: str, source: str) -> str:
    """The data file's text (stable order, so regenerating shows a clean diff)."""
    items = [asdict(specs[name]) for name in sorted(specs)]
    return (
        json.dumps({"vllm_version": version, "source": source, "flags": items}, indent=1, ensure_ascii=False)
        + "\n"
    )


_DATA = _load_data()
BUILTIN_FLAGS: Mapping[str, FlagSpec] = _load_builtin(_DATA)
VLLM_VERSION: str = _DATA["vllm_version"]  # the vLLM whose help built the table
del _DATA

# Every vLLM release whose `--help=all` vtui bundles: version -> (help text in data/, generated table).
# The first is the default (BUILTIN_FLAGS: the simulated engine's, the planner's); the others are what an
# instance is checked against when its vLLM is that release but its own parser cannot be read.
BUNDLED: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "0.32.0": ("serve_help_0_32.txt", "vllm_serve_flags.json"),
        "0.33.0": ("serve_help_0_33.txt", "vllm_serve_flags_0_33.json"),
    }
)
_BUNDLED_TABLES: dict[str, Mapping[str, FlagSpec]] = {VLLM_VERSION: BUILTIN_FLAGS}


def _release(version: str) -> tuple[int, int]:
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]]
    return (parts + [0, 0])[0], (parts + [0, 0])[1]


def bundled_version(version: str | None) -> str:
    """The bundled schema's release for a vLLM version: the same minor release, else the newest bundled
    one before it (a nightly after the last bundled release takes that release's flags), else the
    default. `0.33.2` -> `0.33.0`, `0.34.0.dev3` -> `0.33.0`, `0.20.1` or None -> `0.32.0`."""
    if not version or not re.match(r"\d", version):
        return VLLM_VERSION
    wanted = _release(version)
    older = [v for v in BUNDLED if _release(v) <= wanted]
    return max(older, key=_release) if older else VLLM_VERSION


def bundled_flags(version: str | None = None) -> Mapping[str, FlagSpec]:
    """The bundled table for a vLLM version (see `bundled_version`); read once per release."""
    release = bundled_version(version)
    table = _BUNDLED_TABLES.get(release)
    if table is None:
        data_file = DATA_FILE.with_name(BUNDLED[release][1])
        table = _BUNDLED_TABLES[release] = _load_builtin(json.loads(data_file.read_text(encoding="utf-8")))
    return table


# The knobs the seeds discuss: the flag editor shows these first.
SEED_FLAGS: tuple[str, ...] = tuple(
    name
    for name in (
        "gpu-memory-utilization",
        "max-model-len",
        "max-num-seqs",
        "max-num-batched-tokens",
        "tensor-parallel-size",
        "pipeline-parallel-size",
        "dtype",
        "quantization",
        "kv-cache-dtype",
        "enable-prefix-caching",
        "enable-chunked-prefill",
        "enforce-eager",
        "served-model-name",
        "block-size",
        "kv-cache-memory-bytes",
        "swap-space",
        "api-server-count",
        "api-key",
        "trust-remote-code",
        "revision",
        "tokenizer",
        "tokenizer-mode",
        "download-dir",
        "num-scheduler-steps",
    )
    if name in BUILTIN_FLAGS
)

FlagTable = Mapping[str, FlagSpec]  # canonical name -> spec: BUILTIN_FLAGS or an installed vLLM's


def _sim(
    name: str, kind: str, default: object, help_text: str, choices: tuple[str, ...] | None = None
) -> FlagSpec:
    return FlagSpec(name=name, type=kind, choices=choices, default=default, help=help_text, group="sim")


# The simulated engine's own options (vtui/sim/args.py; tests/layout checks they agree). Valid only on
# an instance with engine = "sim": a real `vllm serve` rejects them.
SIM_FLAGS: Mapping[str, FlagSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            _sim("sim-gpu-memory-gib", "float", 80.0, "memory of each simulated GPU"),
            _sim("sim-num-gpus", "int", 8, "GPUs on the simulated box"),
            _sim("sim-startup-scale", "float", 1.0, "startup time scale (0 = instant)"),
            _sim("sim-speed", "float", 1.0, "speed model scale (2 = twice as fast)"),
            _sim("sim-params", "str", None, "model size when unknown, e.g. 8B"),
            _sim("sim-load", "int", 0, "built-in background clients"),
            _sim("sim-engine-child", "bool", False, "spawn a VLLM::EngineCore child process"),
            _sim("sim-metrics-version", "str", "0.32", "metric names of this vLLM", ("0.32", "v0")),
            _sim("sim-device", "str", "none", "cuda: also hold real CUDA memory", ("none", "cuda")),
            _sim("sim-stats-interval", "float", 10.0, "seconds between stats lines"),
        )
    }
)
_ALL: FlagTable = MappingProxyType({**BUILTIN_FLAGS, **SIM_FLAGS})
_TABLES: dict[int, tuple[FlagTable, FlagTable, Mapping[str, str]]] = {}


def _table(flags: FlagTable | None) -> tuple[FlagTable, Mapping[str, str]]:
    """(the flags plus the sim engine's options, alias -> canonical name) for a flag table (None: the
    bundled one). Memoised per table object: a schema is read once and kept."""
    base = BUILTIN_FLAGS if flags is None else flags
    hit = _TABLES.get(id(base))
    if hit is None or hit[0] is not base:
        merged = _ALL if flags is None else MappingProxyType({**base, **SIM_FLAGS})
        aliases = MappingProxyType(
            {alias.lstrip("-"): spec.name for spec in base.values() for alias in spec.aliases}
        )
        if len(_TABLES) > 16:
            _TABLES.clear()
        hit = _TABLES[id(base)] = (base, merged, aliases)
    return hit[1], hit[2]


def flag_spec(name: str, flags: FlagTable | None = None) -> FlagSpec | None:
    """The spec of a canonical vLLM flag or a `sim-…` option of the simulated engine. `flags`: the table
    to look in (an installed vLLM's schema); None: the bundled 0.32 one (also for every function below)."""
    return _table(flags)[0].get(name)


def canonical_name(name: str, flags: FlagTable | None = None) -> str | None:
    """The canonical flag name for a name or alias (`tp`, `-tp`, `--device-memory-utilization`)."""
    known, aliases = _table(flags)
    bare = name.lstrip("-")
    if bare in known:
        return bare
    return aliases.get(bare)


def suggest(name: str, flags: FlagTable | None = None) -> str | None:
    """The closest known flag name (did-you-mean), or None: `max_num_seqs` -> `max-num-seqs`."""
    known, aliases = _table(flags)
    bare = name.lstrip("-")
    for candidate in (bare, bare.replace("_", "-"), bare.lower().replace("_", "-")):
        if candidate in known:
            return candidate
        if candidate in aliases:
            return aliases[candidate]
        if candidate.startswith("no-") and candidate[3:] in known:
            return candidate[3:]
        inverse = inverse_switch(
            candidate
        )  # 0.33's `disable-x` of a switch `enable-x`: write enable-x = false
        if inverse and inverse in known and known[inverse].negatable:
            return inverse
    close = difflib.get_close_matches(bare.replace("_", "-"), list(known), n=1, cutoff=0.75)
    return close[0] if close else None


# -- values -----------------------------------------------------------------------------------------

# vLLM's `human_readable_int` (vllm/utils/argparse_utils.py), the type of --max-model-len,
# --max-num-batched-tokens, --kv-cache-memory-bytes, ...: a lower-case suffix is decimal and may follow a
# decimal number (truncated like vLLM: int(float(n) * 1000)), an upper-case one binary and takes whole
# numbers only; without a suffix the text goes to int() ("1.5" and "2GiB" are rejected).
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_human_int(text: str) -> int:
    """vLLM's human-readable integer, the same answer as vLLM's parser: '1k' -> 1000, '1K' -> 1024,
    '25.6k' -> 25600, '2G' -> 2**31; '1.5', '1.5K' and '2GiB' raise ValueError (with the reason)."""
    value = str(text).strip()
    match = _HUMAN.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise ValueError(
                f"decimals are not allowed with binary suffixes like {suffix}: {value!r} "
                f"(did you mean {number}{suffix.lower()}?)"
            )
        return int(number) * _BINARY[suffix]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"not an integer or a size like 64M, 1G, 25.6k: {value!r}") from None


def human_int(text: str) -> int | None:
    """`parse_human_int`, or None where vLLM would reject the text."""
    try:
        return parse_human_int(text)
    except ValueError:
        return None


def int_flag(value: object) -> int | None:
    """A flag value as an int (`64`, `64.0`, `"25.6k"`); None when it is no integer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return human_int(value)
    return None


def human_int_arg(text: str) -> int:
    """`parse_human_int` as an argparse `type=` (vtui's own CLI options that take vLLM's sizes)."""
    try:
        return parse_human_int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _q(value: object) -> str:
    return (
        json.dumps(value)
        if isinstance(value, str)
        else repr(value).replace("True", "true").replace("False", "false")
    )


def _at_least(low: float) -> Callable[[float], str | None]:
    return lambda v: None if v >= low else f"must be at least {low:g}, got {v:g}"


def _fraction(v: float) -> str | None:
    return None if 0 < v <= 1 else f"must be a fraction in (0, 1], got {v:g}"


def _model_len(v: float) -> str | None:
    return None if v >= 1 or v == -1 else f"must be a positive length (or -1 for auto), got {v:g}"


_RANGES: Mapping[str, Callable[[float], str | None]] = MappingProxyType(
    {
        "gpu-memory-utilization": _fraction,
        "max-model-len": _model_len,
        "kv-cache-memory-bytes": _at_least(1),
        "swap-space": _at_least(0),
        "cpu-offload-gb": _at_least(0),
        **{
            name: _at_least(1)
            for name in (
                "tensor-parallel-size",
                "pipeline-parallel-size",
                "data-parallel-size",
                "max-num-seqs",
                "max-num-batched-tokens",
                "block-size",
                "api-server-count",
                "max-loras",
                "max-logprobs",
            )
        },
    }
)


def _check_int(spec: FlagSpec, value: object) -> tuple[float | None, str | None]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, None
    if isinstance(value, str) and spec.human:
        if spec.name == "max-model-len" and value.strip().lower() in ("auto", "-1"):
            return -1, None
        number = human_int(value)
        if number is not None:
            return number, None
        return None, f'expected an integer or a size like "64M", got {_q(value)}'
    return None, f"expected an integer, got {_q(value)}"


def _check_scalar(spec: FlagSpec, value: object) -> str | None:
    number: float | None = None
    if spec.type == "int":
        number, problem = _check_int(spec, value)
        if problem:
            return problem
    elif spec.type == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected a number, got {_q(value)}"
        number = value
    elif spec.type == "bool":
        if not isinstance(value, bool):
            return f"expected true or false, got {_q(value)}"
        if value is False and not spec.negatable:
            return f"a switch with no --no-{spec.name} form; remove it to leave it off"
    elif isinstance(value, (bool, list, dict)) and not (value is True and spec.optional_value):
        return f"expected a string, got {_q(value)}"
    if spec.choices is not None and str(value) not in spec.choices:
        shown = ", ".join(spec.choices[:12]) + (", …" if len(spec.choices) > 12 else "")
        close = difflib.get_close_matches(str(value), spec.choices, n=1)
        hint = f'; did you mean "{close[0]}"?' if close else ""
        return f"expected one of {shown}; got {_q(value)}{hint}"
    if number is not None and spec.name in _RANGES:
        return _RANGES[spec.name](number)
    return None


def validate_flag(name: str, value: object, flags: FlagTable | None = None) -> str | None:
    """None when `value` suits flag `name` (canonical name), else a one-line reason."""
    spec = flag_spec(name, flags)
    if spec is None:
        hint = suggest(name, flags)
        return f'unknown flag; did you mean "{hint}"?' if hint else "unknown vllm serve flag"
    if spec.type == "list":
        items = value if isinstance(value, list) else [value]
        if not items and not isinstance(value, list):
            return "expected a value or a list of values"
        item_spec = FlagSpec(name=spec.name, type="str", choices=spec.choices)
        for item in items:
            if isinstance(item, (bool, list, dict)) or item is None:
                return f"expected a string or a list of strings, got {_q(value)}"
            problem = _check_scalar(item_spec, item)
            if problem:
                return problem
        return None
    if spec.type == "json":
        if isinstance(value, (dict, list)):
            return None
        if not isinstance(value, str):
            return f"expected a table or a JSON string, got {_q(value)}"
        if value.strip().startswith(("{", "[")):
            try:
                json.loads(value)
            except json.JSONDecodeError as exc:
                return f"invalid JSON ({exc.msg} at column {exc.colno})"
        return None
    return _check_scalar(spec, value)


def parse_flag_value(name: str, text: str, flags: FlagTable | None = None) -> object:
    """A CLI `--set flag=value` value typed for its flag; ValueError with the reason when it does not fit."""
    canonical = canonical_name(name, flags)
    if canonical is None:
        hint = suggest(name, flags)
        raise ValueError(f'unknown flag "{name}"' + (f'; did you mean "{hint}"?' if hint else ""))
    spec = _table(flags)[0][canonical]
    raw = text.strip()
    value: object = raw
    if spec.type == "bool" or (spec.optional_value and raw.lower() in ("true", "false")):
        lowered = raw.lower()
        if lowered in ("1", "true", "yes", "on", ""):
            value = True
        elif lowered in ("0", "false", "no", "off"):
            value = False
    elif spec.type == "int":
        value = int(raw) if re.fullmatch(r"[-+]?\d+", raw) else raw
    elif spec.type == "float":
        try:
            value = float(raw)
        except ValueError:
            value = raw
    elif spec.type == "list":
        value = [part.strip() for part in raw.split(",") if part.strip()]
    problem = validate_flag(canonical, value, flags)
    if problem:
        raise ValueError(f"{canonical}: {problem}")
    return value


# -- parallel sizes ---------------------------------------------------------------------------------

# vLLM 0.32's data-parallel supervisor (vllm/entrypoints/launchers/dp_supervisor.py): in
# --data-parallel-multi-port-external-lb mode local rank r serves the API on port + r and a supervisor
# serves the aggregated /health, /ready and /readyz on --data-parallel-supervisor-port (default 9256).
DP_SUPERVISOR_PORT = 9256


def _size(flags: Mapping[str, object], name: str, default: int = 1) -> int | None:
    value = flags.get(name, default)
    if value is None:
        return default
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def gpus_needed(flags: Mapping[str, object]) -> tuple[int, str] | None:
    """(GPUs one instance uses on this machine, how: "tensor-parallel-size × …") — tensor × pipeline
    parallel × the data-parallel ranks on this node (--data-parallel-size-local, else
    --data-parallel-size); None while a size is not a whole number >= 1 (a `${VAR}`, a typo)."""
    tp, pp = _size(flags, "tensor-parallel-size"), _size(flags, "pipeline-parallel-size")
    dp = _size(flags, "data-parallel-size")
    if tp is None or pp is None or dp is None:
        return None
    local = _size(flags, "data-parallel-size-local", dp) if "data-parallel-size-local" in flags else dp
    if local is None:
        return None
    terms = ["tensor-parallel-size", "pipeline-parallel-size"]
    if dp > 1 or "data-parallel-size" in flags:
        terms.append(
            "data-parallel-size-local" if "data-parallel-size-local" in flags else "data-parallel-size"
        )
    return tp * pp * local, " × ".join(terms)


def dp_ports(flags: Mapping[str, object], port: int) -> tuple[tuple[int, ...], int | None]:
    """(the API ports an instance's ranks listen on, its DP supervisor port or None). One API port
    unless --data-parallel-multi-port-external-lb, where each local rank has its own."""
    if flags.get("data-parallel-multi-port-external-lb") is not True:
        return (port,), None
    dp = _size(flags, "data-parallel-size") or 1
    local = _size(flags, "data-parallel-size-local", dp) or dp
    supervisor = flags.get("data-parallel-supervisor-port", DP_SUPERVISOR_PORT)
    return tuple(range(port, port + local)), supervisor if isinstance(supervisor, int) else DP_SUPERVISOR_PORT
