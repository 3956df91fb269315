"""The few log facts the supervisor itself needs: the STARTING phase a line announces, and the
root-cause line of a failed start. vtui.telemetry.startup_log builds the full picture on top of these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from vtui.core.state import Phase

# Ordered: the first pattern that matches a line names its phase. Covers V0 and V1 wording.
_PHASE_PATTERNS: tuple[tuple[Phase, re.Pattern[str]], ...] = (
    (
        Phase.API_UP,
        re.compile(r"Starting vLLM (?:API )?server on|Uvicorn running on|Application startup complete"),
    ),
    (
        Phase.CAPTURING_GRAPHS,
        re.compile(
            r"Capturing (?:CUDA )?graphs?|Capturing cudagraphs|Capturing the model for CUDA graphs|Graph capturing finished"
        ),
    ),
    (Phase.KV_CACHE, re.compile(r"(?:GPU|CPU) KV cache size:|# (?:GPU|gpu) blocks:|# cpu blocks:")),
    (
        Phase.PROFILING,
        re.compile(
            r"Model loading took|Memory profiling|torch\.compile takes|Compiling a graph|Available KV cache memory"
        ),
    ),
    (
        Phase.LOADING_WEIGHTS,
        re.compile(
            r"Starting to load model|Loading weights|Loading safetensors checkpoint|Loading model weights"
        ),
    ),
)

_ROOT_CAUSE = re.compile(
    r"(?:^|\] |\s)((?:[\w.]+\.)?(?:ValueError|RuntimeError|OSError|MemoryError|OutOfMemoryError|AssertionError|"
    r"KeyError|TypeError|ImportError|ModuleNotFoundError|FileNotFoundError|HFValidationError|ValidationError|"
    r"NotImplementedError|PermissionError)\b.*)$"
)
_CLI_ERROR = re.compile(r"\b(vllm(?: serve)?: error: .*)$")
_PYDANTIC_VALUE_ERROR = re.compile(r"^\s*Value error, (.*)$")
_GENERIC_FAILURE = re.compile(r"Engine core initialization failed")
_ERROR_LINE = re.compile(r"(?:^|\s)ERROR\s")  # a record at ERROR level, first on its line or after a prefix
# an ERROR record that is a line of a traceback (a frame, its source line) or of a call cut at "(": no cause
_ERROR_FRAME = re.compile(r"ERROR\s.*?\]\s{2,}|ERROR\s.*?\] File \"|\($")


def phase_of(line: str) -> Phase | None:
    """The STARTING phase that this log line announces, if any."""
    for phase, pattern in _PHASE_PATTERNS:
        if pattern.search(line):
            return phase
    return None


def root_cause(lines: Iterable[str]) -> str | None:
    """The most telling error line of a failed start: the first specific exception (vLLM puts the root
    cause above `Engine core initialization failed`), else the CLI's error, else the last ERROR line."""
    specific: str | None = None
    cli_error: str | None = None
    last_error: str | None = None
    for raw in lines:
        line = raw.rstrip()
        if m := _CLI_ERROR.search(line):
            cli_error = cli_error or m.group(1)
            continue
        if m := _PYDANTIC_VALUE_ERROR.match(line):
            specific = specific or m.group(1).strip()
            continue
        if m := _ROOT_CAUSE.search(line):
            text = m.group(1).strip()
            if _GENERIC_FAILURE.search(text):
                last_error = last_error or text
            elif specific is None and not text.endswith(("(", ": 1 validation error for ModelConfig")):
                specific = text
            continue
        if _ERROR_LINE.search(line) and not _ERROR_FRAME.search(line) and "Traceback" not in line:
            last_error = line.strip()
    return specific or cli_error or last_error
