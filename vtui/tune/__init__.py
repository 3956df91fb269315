"""`vtui tune`'s engine: the search space around an instance's flags (`space`), the structured search
in the seeds' order with planner pruning and failure learning (`search`), and the trial runner that
restarts the instance through its session supervisor and load-tests it (`runner`). Textual-free."""

from vtui.tune.search import (
    Measurement,
    Objective,
    Prediction,
    Search,
    StartFailed,
    Trial,
    TrialRunner,
    TuneResult,
    meets_slo,
    score,
)
from vtui.tune.space import MAX_UTILIZATION, Config, Space, build_space, start_config

__all__ = [
    "MAX_UTILIZATION",
    "Config",
    "Measurement",
    "Objective",
    "Prediction",
    "Search",
    "Space",
    "StartFailed",
    "Trial",
    "TrialRunner",
    "TuneResult",
    "build_space",
    "meets_slo",
    "score",
    "start_config",
]
