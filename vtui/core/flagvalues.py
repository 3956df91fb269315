"""Flag values: vLLM's human-readable integers (`parse_human_int`, `human_int`, `int_flag`), a value
checked against its flag's spec and range (`validate_flag`), text read as a flag's value
(`parse_flag_value`), and what the parallel sizes need (`gpus_needed`, `dp_ports`). Import them through
`core.flagspec`.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType

from vtui.core.flagtable import FlagSpec, FlagTable, _table, canonical_name, flag_spec, suggest

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


def _logprobs(v: float) -> str | None:
    # vLLM's ModelConfig.max_logprobs: Field(ge=-1); -1 means no cap
    return None if v >= 0 or v == -1 else f"must be at least 0 (or -1 for no cap), got {v:g}"


_RANGES: Mapping[str, Callable[[float], str | None]] = MappingProxyType(
    {
        "gpu-memory-utilization": _fraction,
        "max-model-len": _model_len,
        "kv-cache-memory-bytes": _at_least(1),
        "swap-space": _at_least(0),
        "cpu-offload-gb": _at_least(0),
        "max-logprobs": _logprobs,
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


# control characters a string flag may not hold: none in a name that vLLM serves, logs and labels
# metrics with; elsewhere tab and newline pass (an inline chat template is text)
_NAME_FLAGS = frozenset({"served-model-name"})
_CONTROL_ANY = re.compile("[\u0000-\u001f\u007f-\u009f\u2028\u2029]")
_CONTROL_TEXT = re.compile("[\u0000-\u0008\u000b-\u001f\u007f-\u009f]")


def _control_in(name: str, value: str) -> str | None:
    m = (_CONTROL_ANY if name in _NAME_FLAGS else _CONTROL_TEXT).search(value)
    if m is None:
        return None
    return f"holds a control character (U+{ord(m.group()):04X} at {m.start()}): {_q(value[:60])}"


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
    elif isinstance(value, str) and (bad := _control_in(spec.name, value)):
        return bad
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


def world_size(flags: Mapping[str, object]) -> int:
    """vLLM's world size of one engine: tensor x pipeline parallel (1 while a size is not a whole number)."""
    tp, pp = _size(flags, "tensor-parallel-size"), _size(flags, "pipeline-parallel-size")
    return (tp or 1) * (pp or 1)


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
