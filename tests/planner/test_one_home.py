"""Each vLLM concept has one home in the source: these scans fail when a second copy comes back (the
drift issue 10 found: a planner regex for log lines startup_log already read, a second quantized-weight
table, a second human-readable-integer parser, phase order and histogram names kept twice)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "vtui"


def _sources() -> dict[str, str]:
    files = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in ROOT.rglob("*.py")}
    assert len(files) > 50, "the scan found no sources"
    return files


def _holders(pattern: str) -> set[str]:
    rx = re.compile(pattern)
    return {name for name, text in _sources().items() if rx.search(text)}


def test_one_human_int_parser() -> None:
    assert _holders(r"\[kKmMgGtT\]|\[kmgtKMGT\]") == {"core/flagvalues.py"}


def test_the_planner_reads_no_vllm_log_itself() -> None:
    assert not {name for name in _holders(r"^import re$|re\.compile\(") if name.startswith("planner/")}


def test_one_table_of_quantized_weight_bytes() -> None:
    assert _holders(r'"awq(?:_marlin)?":\s*[\d.]') == {"core/vllm_memory.py"}


def test_one_phase_order() -> None:
    """No module spells out the startup order (two Phase members in a row): Phase.rank does."""
    assert not _holders(r"Phase\.[A-Z_]+,\s*Phase\.[A-Z_]+")


def test_one_table_of_histogram_names() -> None:
    """Readers take histogram names from promtext.HISTOGRAM_ROLES; only the simulated engine, which
    writes them, spells them too."""
    holders = _holders(r'"vllm:(?:time_to_first_token|inter_token_latency|e2e_request_latency)_seconds"')
    assert {name for name in holders if not name.startswith("sim/")} == {"telemetry/promtext.py"}
