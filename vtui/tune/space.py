"""The tuner's search space: the seeds' flags, each a ladder of candidate values bounded by vLLM's flag
schema (core.flagspec: a flag the installed vLLM lacks is left out, a value it would refuse is dropped),
plus the user's fixed values. A configuration is a full flag set (`Config`), hashable and ordered so a
trial can be looked up and its neighbours found."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from vtui.core.flagspec import flag_spec, validate_flag

# The seeds warn above this; the tuner never proposes more.
MAX_UTILIZATION = 0.95

# Dimensions in the seeds' order: fit (context, memory, KV format) -> concurrency -> latency -> refine.
DIMENSIONS = (
    "max-model-len",
    "gpu-memory-utilization",
    "kv-cache-dtype",
    "max-num-seqs",
    "max-num-batched-tokens",
    "enable-chunked-prefill",
    "enable-prefix-caching",
)
# Along these, a failure to start in one direction rules out the values further that way (an OOM at
# utilization 0.93 rules out 0.95; a too-long context that does not fit rules out longer ones).
MONOTONE_FAILING_UP = ("gpu-memory-utilization", "max-model-len", "max-num-seqs", "max-num-batched-tokens")

SEQS_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
BATCHED_LADDER = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
UTIL_LADDER = (0.80, 0.85, 0.90, 0.92, 0.95)
QUALITY_KV_DTYPES = ("fp8",)

FlagValue = bool | int | float | str


@dataclass(frozen=True, order=True)
class Config:
    """One full flag set to try (sorted (flag, value) pairs: hashable, printable)."""

    items: tuple[tuple[str, FlagValue], ...]

    @staticmethod
    def of(flags: Mapping[str, object]) -> Config:
        return Config(tuple(sorted((k, v) for k, v in flags.items() if v is not None)))  # type: ignore[misc]

    @property
    def flags(self) -> dict[str, FlagValue]:
        return dict(self.items)

    def get(self, name: str, default: object = None) -> object:
        return self.flags.get(name, default)

    def with_(self, **changes: object) -> Config:
        flags: dict[str, object] = dict(self.flags)
        for key, value in changes.items():
            flags[key.replace("_", "-")] = value
        return Config.of(flags)

    def changed(self, other: Config) -> dict[str, object]:
        """The flags whose value here differs from `other` (the trial's label)."""
        mine, theirs = self.flags, other.flags
        return {k: mine.get(k) for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)}


@dataclass(frozen=True)
class Space:
    """Candidate values per dimension (ascending for numbers), the fixed flags, and the floor of the
    context length."""

    values: Mapping[str, tuple[FlagValue, ...]]
    required_context: int
    fixed: Mapping[str, FlagValue] = field(default_factory=dict)

    def dims(self) -> list[str]:
        return [d for d in DIMENSIONS if d in self.values and d not in self.fixed]

    def size(self) -> int:
        n = 1
        for d in self.dims():
            n *= len(self.values[d])
        return n

    def neighbours(self, config: Config, dim: str) -> list[FlagValue]:
        """The values one step either side of `config`'s along `dim` (or the nearest ones)."""
        ladder = list(self.values.get(dim, ()))
        current = config.get(dim)
        if current in ladder:
            i = ladder.index(current)
            return [ladder[j] for j in (i - 1, i + 1) if 0 <= j < len(ladder)]
        return ladder[:1]

    def contains(self, config: Config) -> bool:
        return all(config.get(d) in self.values[d] for d in self.dims() if config.get(d) is not None)


def _allowed(name: str, values: Iterable[FlagValue]) -> tuple[FlagValue, ...]:
    """The values the installed vLLM's schema accepts for `name`; () when it has no such flag."""
    spec = flag_spec(name)
    if spec is None:
        return ()
    out = []
    for value in values:
        if spec.choices is not None and isinstance(value, str) and value not in spec.choices:
            continue
        if validate_flag(name, value) is None and value not in out:
            out.append(value)
    return tuple(out)


def _ladder(ladder: tuple[int, ...], start: int, low: int, high: int) -> tuple[int, ...]:
    """The ladder's rungs within [low, high], with `start` itself kept (sorted)."""
    return tuple(sorted({v for v in ladder if low <= v <= high} | {start}))


def build_space(
    start: Mapping[str, object],
    *,
    required_context: int,
    model_max_len: int | None,
    concurrency: int,
    allow_quality_trade: bool = False,
    fixed: Mapping[str, FlagValue] | None = None,
    default_max_num_seqs: int = 256,
    default_max_num_batched_tokens: int = 2048,
) -> Space:
    """The space around the instance's starting flags: max-num-seqs from concurrency/8 to 4 × the
    starting load, max-num-batched-tokens from 256 to 32k (never below the context when chunked prefill
    is off, which the search handles per configuration), utilization up to MAX_UTILIZATION, the context
    from the required length to the starting one (never below the required one)."""
    fixed = dict(fixed or {})
    seqs_start = _int(start.get("max-num-seqs")) or default_max_num_seqs
    tokens_start = _int(start.get("max-num-batched-tokens")) or default_max_num_batched_tokens
    util_start = start.get("gpu-memory-utilization")
    util_start = float(util_start) if isinstance(util_start, (int, float)) else None
    len_start = _int(start.get("max-model-len")) or model_max_len or required_context
    values: dict[str, tuple[FlagValue, ...]] = {}
    top = max(4 * concurrency, seqs_start)
    values["max-num-seqs"] = _allowed(
        "max-num-seqs", _ladder(SEQS_LADDER, seqs_start, max(1, concurrency // 8), top)
    )
    values["max-num-batched-tokens"] = _allowed(
        "max-num-batched-tokens", _ladder(BATCHED_LADDER, tokens_start, BATCHED_LADDER[0], BATCHED_LADDER[-1])
    )
    utils = {u for u in UTIL_LADDER if u <= MAX_UTILIZATION}
    if util_start is not None and util_start <= MAX_UTILIZATION:
        utils.add(util_start)
    values["gpu-memory-utilization"] = _allowed("gpu-memory-utilization", sorted(utils))
    lens = sorted({max(required_context, len_start), required_context})
    if model_max_len:
        lens = [v for v in lens if v <= model_max_len] or [required_context]
    values["max-model-len"] = _allowed("max-model-len", lens)
    values["enable-chunked-prefill"] = _allowed("enable-chunked-prefill", (True, False))
    values["enable-prefix-caching"] = _allowed("enable-prefix-caching", (True, False))
    if allow_quality_trade:
        values["kv-cache-dtype"] = _allowed("kv-cache-dtype", ("auto", *QUALITY_KV_DTYPES))
    values = {k: v for k, v in values.items() if v}
    for name, value in fixed.items():
        values[name] = (value,)
    return Space(values=values, required_context=required_context, fixed=fixed)


def start_config(start: Mapping[str, object], space: Space, defaults: Mapping[str, FlagValue]) -> Config:
    """The starting flags with every dimension made explicit (vLLM's default where the flags leave it),
    so each trial's flag set is the full set in effect."""
    flags: dict[str, object] = {**dict(start), **dict(space.fixed)}
    for dim in space.dims():
        if flags.get(dim) is None and dim in defaults:
            flags[dim] = defaults[dim]
    if isinstance(flags.get("max-model-len"), int) and flags["max-model-len"] < space.required_context:  # type: ignore[operator]
        flags["max-model-len"] = space.required_context
    return Config.of(flags)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
