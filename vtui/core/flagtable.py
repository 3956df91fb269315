"""The flag tables: `FlagSpec`, the bundled `vllm serve` tables (`BUILTIN_FLAGS`: 0.32's, from
`vllm_serve_flags.json`; `bundled_flags(version)`: each bundled release's, 0.32 to 0.34), the simulated engine's
`sim-…` options, and the lookups (`flag_spec`, `canonical_name`, `suggest`). Import them through
`core.flagspec`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from types import MappingProxyType
from typing import Any

# `FlagSpec` and `inverse_switch` live in `core.flagdef` (the help parser builds on them too); kept here
# as names of this module.
from vtui.core.flagdef import FLAG_TYPES as FLAG_TYPES
from vtui.core.flagdef import FlagSpec as FlagSpec
from vtui.core.flagdef import inverse_switch as inverse_switch

# -- the built-in table -----------------------------------------------------------------------------

DATA_FILE = Path(__file__).with_name("vllm_serve_flags.json")


HELP_FILE = Path(__file__).with_name("data") / "serve_help_0_32.txt"


def _load_data() -> dict[str, Any]:
    """The generated table; before it exists (first run of the generator) the bundled help, parsed."""
    data: dict[str, Any]  # JSON
    if DATA_FILE.exists():
        data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
        return data
    from vtui.core.servehelp import parse_serve_help  # only on this path (no cycle: it builds on flagdef)

    specs = parse_serve_help(HELP_FILE.read_text(encoding="utf-8")) if HELP_FILE.exists() else {}
    data = json.loads(specs_to_json(specs, "0.32.0", HELP_FILE.name))
    return data


def _load_builtin(data: dict[str, Any]) -> Mapping[str, FlagSpec]:
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
        "0.34.0": ("serve_help_0_34.txt", "vllm_serve_flags_0_34.json"),
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


def newest_bundled() -> str:
    """The newest vLLM release whose schema vtui bundles ("0.34.0")."""
    return max(BUNDLED, key=_release)


def bundles(version: str | None) -> bool:
    """Whether vtui bundles the schema of this vLLM's own minor release (`0.34.2` -> 0.34.0's)."""
    if not version or not re.match(r"\d", version):
        return False
    return any(_release(v) == _release(version) for v in BUNDLED)


class GuessedFlags(Mapping[str, FlagSpec]):
    """A flag table that stands in for one vtui cannot know: the newest bundled release's, for a vLLM
    whose own parser was not read and whose release vtui does not bundle (or no vLLM at all). The layout
    loader warns about a flag outside it instead of refusing it: the target vLLM may have it. `why`:
    which vLLM it stands in for, and why its own table was not read."""

    def __init__(self, flags: Mapping[str, FlagSpec], why: str) -> None:
        self._flags = flags
        self.why = why

    def __getitem__(self, name: str) -> FlagSpec:
        return self._flags[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._flags)

    def __len__(self) -> int:
        return len(self._flags)


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

# The flags the KV planner reads (`planner.params_from_flags`): the flag editor re-plans when one of
# them changes, since the others do not move the KV figures. A test holds this list to what the planner
# reads.
PLAN_FLAGS: tuple[str, ...] = (
    "gpu-memory-utilization",
    "max-model-len",
    "max-num-seqs",
    "max-num-batched-tokens",
    "tensor-parallel-size",
    "pipeline-parallel-size",
    "kv-cache-dtype",
    "dtype",
    "quantization",
    "block-size",
    "kv-cache-memory-bytes",
    "enforce-eager",
    "disable-hybrid-kv-cache-manager",
    # what decides 0.34's extensible KV cache (core.vllm_memory.memory_rule)
    "enable-extensible-kv-cache",
    "num-gpu-blocks-override",
    "enable-elastic-ep",
    "kv-transfer-config",
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
