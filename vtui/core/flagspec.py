"""The built-in schema of `vllm serve` flags (0.32), so layouts are checked before anything launches.

`BUILTIN_FLAGS` is loaded from `vllm_serve_flags.json`, which `scripts/gen_flagspec.py` builds from the
real `vllm serve --help=all` (kept in `vtui/core/data/`) with `servehelp.parse_serve_help`; the telemetry
package reuses that parser on the installed vLLM's help. Validation messages are written to be shown
after a dotted key: `instance[2].flags.max-num-seqs: expected an integer, got "many"`.

The schema is three modules: `flagtable` (`FlagSpec`, the bundled tables, the sim options, the
lookups), `servehelp` (the help parser) and `flagvalues` (values, ranges, human integers, parallel
sizes). This one re-exports what many callers use; the help parser, `specs_to_json` and `dp_ports`
are imported from their own modules.
"""

from __future__ import annotations

from vtui.core.flagtable import (
    BUILTIN_FLAGS,
    BUNDLED,
    DATA_FILE,
    HELP_FILE,
    PLAN_FLAGS,
    SEED_FLAGS,
    SIM_FLAGS,
    VLLM_VERSION,
    FlagSpec,
    FlagTable,
    GuessedFlags,
    bundled_flags,
    bundled_version,
    bundles,
    canonical_name,
    flag_spec,
    newest_bundled,
    suggest,
)
from vtui.core.flagvalues import (
    gpus_needed,
    human_int,
    human_int_arg,
    int_flag,
    parse_flag_value,
    parse_human_int,
    validate_flag,
)

__all__ = [
    "BUILTIN_FLAGS",
    "BUNDLED",
    "DATA_FILE",
    "HELP_FILE",
    "PLAN_FLAGS",
    "SEED_FLAGS",
    "SIM_FLAGS",
    "VLLM_VERSION",
    "FlagSpec",
    "FlagTable",
    "GuessedFlags",
    "bundled_flags",
    "bundles",
    "bundled_version",
    "canonical_name",
    "flag_spec",
    "gpus_needed",
    "human_int",
    "human_int_arg",
    "int_flag",
    "newest_bundled",
    "parse_flag_value",
    "parse_human_int",
    "suggest",
    "validate_flag",
]
