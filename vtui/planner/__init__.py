"""The KV planner: how many tokens and concurrent requests a `vllm serve` launch will hold.

`plan(load_model_config(path), PlanParams(...))` reproduces vLLM V1's block arithmetic (see
`vtui.planner.kv`) and estimates what the KV budget will be when it is not given
(see `vtui.planner.memory.ASSUMPTIONS`); a budget that a vLLM log states comes from
`vtui.telemetry.startup_log` (`StartupFacts.kv_memory_bytes`), the one reader of vLLM's startup lines.
Textual-free; the flag editor calls `plan` as values change.
"""

from vtui.core.flagspec import int_flag
from vtui.planner.config import (
    ModelConfig,
    ModelConfigError,
    find_config,
    from_dict,
    load_model_config,
    model_config_for,
)
from vtui.planner.core import Plan, PlanParams, flag_default, params_from_flags, plan
from vtui.planner.memory import ASSUMPTIONS

__all__ = [
    "ASSUMPTIONS",
    "ModelConfig",
    "ModelConfigError",
    "Plan",
    "PlanParams",
    "find_config",
    "flag_default",
    "from_dict",
    "int_flag",
    "load_model_config",
    "model_config_for",
    "params_from_flags",
    "plan",
]
