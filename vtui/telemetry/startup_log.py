"""Startup facts from a `vllm serve` log, for every vLLM generation: the V0 (0.4-0.7) memory profiling
and "# GPU blocks" lines, the V1 "Available KV cache memory" / "KV cache size" / "Maximum concurrency"
lines, timings, max model len, non-default args and the version banner; with or without the
`(EngineCore… pid=…)` prefixes; 0.30-0.33 wrote the same lines (tests/telemetry/test_telemetry_v033.py).
Also read through: systemd's journal prefix, terminal colour codes, vllm-metal's Metal budget error.
`parse_startup(lines)` reads them: the UI at READY and after a failure,
`vtui diagnose`, and the planner's "from the log" budget (`StartupFacts.kv_memory_bytes`). The live
STARTING phase is the supervisor's (core.phases, through core.instance), not this module's.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from vtui.core.phases import phase_of
from vtui.core.state import Phase
from vtui.telemetry.facts import FACT_KEYS, StartupFacts

__all__ = ["FACT_KEYS", "StartupFacts", "across_wrap", "extend_record", "parse_startup", "plain"]

_V0_DEFAULT_BLOCK_SIZE = 16
# Printed once per worker (tensor/pipeline parallel): the engine sizes its cache by the smallest.
_SMALLEST_WINS = frozenset({"kv_cache_tokens", "max_concurrency", "available_kv_gib"})
# A line that starts a log record; any other line may be the rest of the one before (a wrapped paste).
_RECORD_START = re.compile(
    r"^\s*(?:[>+*│▎-]\s*)*(?:\S+\s+\|\s*)?"  # quote / list markers, a compose service name
    r"(?:\(|\[|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\b|\d{2}-\d{2} |\d{4}-\d{2}-|\d{2}:\d{2}:\d{2} "
    r"|[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} )"  # systemd's journal / syslog: "Aug 18 22:22:05 host unit[pid]: "
)
_MAX_JOINED = 8192
# uvicorn's access lines (`INFO:     127.0.0.1:40112 - "GET /metrics HTTP/1.1" 200 OK`, two a second from
# vtui's own probes): a record of its own that carries no startup fact, so the rules are not tried on it
_ACCESS = re.compile(r'(?:^|\) )INFO:\s+\S+ - "[A-Z]+ \S* HTTP/\d')
_BOLD_FIGURE = re.compile(r"\*\*([\d.,]+(?: ?[A-Za-z]+)?)\*\*")  # **20865**, **7.51 s**, **34.11 seconds**
_QUOTE_MARKS = re.compile(r"^\s*(?:[>│▎]\s?)+")  # a quoted paste repeats its marker on every wrapped line
# vLLM's coloured log levels and prefixes (a terminal's log, or a CI page's caret form "^[[0;36m")
_ANSI = re.compile(r"(?:\x1b|\^\[)\[[0-9;]*m")


def plain(line: str) -> str:
    """`line` without terminal colour codes, as every rule here and in diagnosis reads it."""
    return _ANSI.sub("", line) if "[" in line else line


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _int(text: str) -> int:
    return int(float(text.replace(",", "")))


def _mib(text: str) -> float:
    return round(_num(text) / 1024, 4)


_N = r"([\d][\d,]*(?:\.\d+)?)"  # 1,048,576 / 2048.00 / 79.22
_SN = r"(-?[\d][\d,]*(?:\.\d+)?)"  # a figure that can be negative: a KV budget with no room left

# (pattern, [(fact, converter, priority) per group]). A later match replaces an earlier one of lower or
# equal priority, so an explicit statement beats a figure derived from an error message.
_Rule = tuple[re.Pattern[str], tuple[tuple[str, Callable[[str], object], int], ...]]
_RULES: tuple[_Rule, ...] = tuple(
    (re.compile(p), groups)
    for p, groups in (
        # version banner (0.11+ ASCII art), API server line (0.4-0.10), the banner's plain form (0.30+:
        # "vLLM server version V, serving model M" without the logo, vllm/entrypoints/common/startup.py in
        # 0.33), engine init line
        (r"[▀▄█]\s+version\s+(\d[\w.+\-]*)", (("vllm_version", str, 3),)),
        (r"vLLM (?:API )?server version (\d[\w.+\-]*)", (("vllm_version", str, 3),)),
        (r"vLLM server version \S+, serving model (\S.*?)\s*$", (("model", str, 2),)),
        (r"LLM engine \(v(\d[\w.+\-]*)\)(?: with config| w?$)", (("vllm_version", str, 2),)),  # or cut short
        (r"[▀▄█]\s+model\s+(\S.*?)\s*$", (("model", str, 2),)),
        (r"with config: model='([^']*)'", (("model", str, 1),)),
        (r"^\s*model='([^']*)', (?:speculative_config|tokenizer)=", (("model", str, 1),)),  # config split off
        (
            r"Starting to load model (\S+?)(?:\.\.\.)?\s*$",
            (("model", str, 0),),
        ),  # when the config line is cut away
        # max model len
        (r"Using max model len (\d+)", (("max_model_len", _int, 3),)),
        # --max-model-len auto (0.31+, kv_cache_utils.py): the length vLLM settled on after sizing the cache
        (r"Auto-fit max_model_len: reduced from \d+ to (\d+)", (("max_model_len", _int, 4),)),
        (r"Auto-fit max_model_len: full model context length (\d+) fits", (("max_model_len", _int, 4),)),
        (r"with config: .*?\bmax_seq_len=(\d+)", (("max_model_len", _int, 2),)),
        (r"\bmax_seq_len=(\d+), download_dir=", (("max_model_len", _int, 2),)),  # the config dump, split off
        # memory profile: V0 0.6.4 key=value, 0.6.5 table, 0.7 sentences
        (r"total_gpu_memory(?:=|\s*\(|\s+)\s*" + _N + r"\s*GiB", (("total_gpu_gib", _num, 3),)),
        (r"gpu_memory_utilization(?:=|\s*\(|\s+)\s*" + _N, (("gpu_memory_utilization", _num, 3),)),
        (r"model weights take\s+" + _N + r"\s*GiB", (("model_weights_gib", _num, 3),)),
        (r"non_torch_memory(?:=|\s+takes\s+|\s+)\s*" + _N + r"\s*GiB", (("non_torch_gib", _num, 3),)),
        (
            r"PyTorch activation peak memory(?:\s+takes)?\s+" + _N + r"\s*GiB",
            (("activation_peak_gib", _num, 3),),
        ),
        (r"peak_torch_memory=" + _N + r"\s*GiB", (("_peak_torch_gib", _num, 3),)),
        (
            r"the rest of the memory reserved for KV Cache is\s+" + _SN + r"\s*GiB",  # < 0: no room
            (("available_kv_gib", _num, 3),),
        ),
        (r"kv_cache_size=" + _SN + r"\s*GiB", (("available_kv_gib", _num, 3),)),
        (r"available_kv_cache_memory\s+" + _N + r"\s*GiB", (("available_kv_gib", _num, 3),)),
        (
            r"Available KV cache memory:\s*" + _SN + r"\s*GiB",
            (("available_kv_gib", _num, 3),),
        ),  # < 0: no room
        (
            r"(?:Explicitly|Auto) set \(" + _N + r"/[\d.]+\) GiB for KV cache",
            (("available_kv_gib", _num, 3),),
        ),
        # weights and load time
        (r"Loading model weights took " + _N + r"\s*GB", (("model_weights_gib", _num, 2),)),
        (r"Loading model weights took " + _N + r"\s*MB", (("model_weights_gib", _mib, 2),)),  # 0.3
        (
            r"Loading model weights took " + _N + r"\s*GB and " + _N + r"\s*s",  # 0.7.3
            (("model_weights_gib", _num, 2), ("model_load_secs", _num, 2)),
        ),
        (
            r"Model loading took " + _N + r"\s*Gi?B(?: memory)? and " + _N + r"\s*s",  # GB in 0.7-0.8
            (("model_weights_gib", _num, 2), ("model_load_secs", _num, 2)),
        ),
        (r"Model loading took " + _N + r"\s*Gi?B", (("model_weights_gib", _num, 2),)),
        (r"Loading weights took " + _N + r" seconds", (("model_load_secs", _num, 1),)),
        # KV cache size
        (
            # "# GPU blocks" (0.4-0.6), "# cuda blocks" (0.7), "# cpu blocks" (the CPU backend's device
            # blocks, 0.7-0.8); a paste can lose the leading "# "
            r"(?:# |\b)(?:GPU|CUDA|cuda|gpu|XPU|HPU|NPU|TPU|cpu) blocks: (\d+), # (?:CPU|cpu) blocks: (\d+)",
            (("num_gpu_blocks", _int, 3), ("num_cpu_blocks", _int, 3)),
        ),
        (r"# (?:GPU|CUDA|gpu) blocks: (\d+)\s*$", (("num_gpu_blocks", _int, 3),)),
        (
            r"cache_config_info with initialization after num_gpu_blocks is: (\d+)",
            (("num_gpu_blocks", _int, 3),),
        ),
        (r"with num_gpu_blocks_override=(\d+)", (("num_gpu_blocks", _int, 3),)),
        (
            r"reserved " + _N + r"\s*GiB memory for KV Cache as specified by kv_cache_memory_bytes",
            (("available_kv_gib", _num, 3),),
        ),
        # the gpu_worker summary after graph capture (0.11+): what the run really used
        (
            r"Free memory on device[^(]*\(" + _N + "/" + _N + r" GiB\) on startup\. Desired GPU memory "
            r"utilization is \(" + _N,
            (("_free_gib", _num, 2), ("total_gpu_gib", _num, 2), ("gpu_memory_utilization", _num, 2)),
        ),
        (r"Current kv cache memory in use is " + _SN + r"\s*GiB", (("available_kv_gib", _num, 3),)),
        # the extensible KV cache (0.34): grown after warmup to its final size, which replaces the first
        (
            r"Extended KV cache to (\d+) blocks \(" + _N + r"\s*GiB\)",
            (("num_gpu_blocks", _int, 4), ("available_kv_gib", _num, 4)),
        ),
        (r"Extended KV cache to \d+ blocks \(" + _N + r"\s*GiB\)", (("extended_kv_gib", _num, 4),)),
        (r"Actual usage(?: is|:) " + _N + r"\s*GiB for weights?", (("model_weights_gib", _num, 2),)),
        (r"\b" + _N + r"\s*GiB for peak activation", (("activation_peak_gib", _num, 2),)),
        (r"\b" + _N + r"\s*GiB for non-torch memory", (("non_torch_gib", _num, 2),)),
        (r"(?:GPU|CPU|XPU|TPU|NPU|HPU)? ?KV cache size: " + _N + " tokens", (("kv_cache_tokens", _int, 3),)),
        (
            r"Maximum concurrency for " + _N + r" tokens per request: " + _N + "x",
            (("max_concurrency_for_tokens", _int, 3), ("max_concurrency", _num, 3)),
        ),
        # timings
        (r"init engine \(.*?\) took " + _N + r"\s*s", (("init_engine_secs", _num, 3),)),
        (r"[Gg]raph capturing finished in " + _N + r"\s*secs?", (("cuda_graph_capture_secs", _num, 3),)),
        (r"torch\.compile (?:takes|took) " + _N + r"\s*s in total", (("torch_compile_secs", _num, 3),)),
        # failure messages that carry figures
        (  # a paste may cut it after "is needed": the length and the need, without what was available
            r"max seq len \((\d+)\),\s*\(?"
            + _N
            + r" GiB KV cache is needed(?:, which is larger than the available KV "
            r"cache memory \(" + _N + r" GiB\))?",
            (("max_model_len", _int, 1), ("kv_needed_gib", _num, 3), ("available_kv_gib", _num, 1)),
        ),
        (r"estimated maximum model length is (\d+)", (("estimated_max_model_len", _int, 3),)),
        (
            r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in "
            r"KV cache \((\d+)\)",
            (("max_model_len", _int, 1), ("kv_cache_tokens", _int, 1)),
        ),
        (
            r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens",
            (("max_model_len", _int, 1),),
        ),
        (
            r"Free memory on device[^(]*\("
            + _N
            + "/"
            + _N
            + r" GiB\) on startup is less than desired GPU memory "
            r"utilization \(" + _N,
            (("_free_gib", _num, 1), ("total_gpu_gib", _num, 1), ("gpu_memory_utilization", _num, 1)),
        ),
        (r"desired CPU memory utilization \(" + _N, (("gpu_memory_utilization", _num, 1),)),
        # vllm-metal's paged-attention budget, in the error that says it leaves no KV cache (its own lines)
        (
            r"\bmetal_limit=" + _N + r"GB, fraction=" + _N,
            (("total_gpu_gib", _num, 2), ("gpu_memory_utilization", _num, 2)),
        ),
        (r"\bmodel_memory=" + _N + r"GB", (("model_weights_gib", _num, 2),)),
        (r"\bkv_budget=" + _SN + r"GB", (("available_kv_gib", _num, 3),)),
    )
)
_ENGINE_RULES: tuple[tuple[re.Pattern[str], str, int], ...] = tuple(
    (re.compile(p), e, prio)
    for p, e, prio in (
        (r"Initializing a V1 LLM engine", "V1", 3),
        (r"Initializing an? (?:V0 )?LLM engine", "V0", 3),
        # V1's process prefixes; V0's tensor-parallel workers say "(VllmWorkerProcess pid=…)"
        (
            r"\((?:A[Pp][Ii]Server(?:_\d+)?|EngineCore[\w-]*|VllmWorker(?:[ -](?:TP)?\d+| rank=\d+)|Worker(?:_\w+)?)"
            r" pid=\d+\)",
            "V1",
            1,
        ),
        (r"Available KV cache memory:|KV cache size: [\d,]+ tokens", "V1", 2),
        (
            r"# (?:GPU|CUDA) blocks: \d+, # CPU blocks|Memory profiling (?:results|takes)|Loading model weights took",
            "V0",
            2,
        ),
    )
)
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
_NON_DEFAULT_CUT = re.compile(r"non-default args: (\{.*)$")  # a paste cut the dict short: its pairs so far
_NAMESPACE = re.compile(r"\bargs: Namespace\((.*?)\)?\s*$")  # a paste may cut it short: its pairs so far
_KV_PAIR = re.compile(r"'(\w+)': ('(?:[^'\\]|\\.)*'|\"[^\"]*\"|\[[^\]]*\]|\{[^}]*\}|[^,{}]+)")
_NS_PAIR = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|\[[^\]]*\]|\{[^}]*\}|[^,()]+(?:\([^)]*\))?)")
_V0_CAPTURE = re.compile(r"Capturing the model for CUDA graphs")  # 0.4-0.5 wording, not in core.phases
# The extensible KV cache's final size: the token count and concurrency logged for the first reservation
# no longer hold (a "KV cache size" line after it, or the blocks, give them again).
_EXTENDED = re.compile(r"Extended KV cache to \d+ blocks")
_STALE_AFTER_EXTENSION = ("kv_cache_tokens", "max_concurrency")
_NEW_RUN = re.compile(r"[▀▄█]\s+version\s+\d|vLLM (?:API )?server version \d")


def _literal(text: str) -> object:
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _dict_of(text: str) -> dict[str, object]:
    try:
        value = ast.literal_eval(text)
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    return {m.group(1): _literal(m.group(2)) for m in _KV_PAIR.finditer(text)}  # some values aren't literals


def continues(record: str, line: str) -> bool:
    """True when `line` does not start a log record: the rest of `record`, which a paste wrapped."""
    return bool(record) and bool(line.strip()) and not _RECORD_START.match(line)


def across_wrap(pattern: re.Pattern[str], record: str, line: str) -> re.Match[str] | None:
    """A match that a paste wrapped onto `line`: the record so far joined to it, cut mid-word (terminal
    width) or at a space (re-flowed, maybe indented), and matching across the cut; None otherwise."""
    if not continues(record, line):
        return None
    line = _QUOTE_MARKS.sub("", line)
    for head, tail in ((record, line), (record.rstrip() + " ", line.lstrip())):
        m = pattern.search(head + tail, max(0, len(head) - 400))
        if m is not None and m.start() < len(head) < m.end():
            return m
    return None


def extend_record(record: str, line: str) -> str:
    """The record `line` belongs to: `record` with the wrapped rest appended, or `line` starting a new one."""
    if continues(record, line):
        return (record + _QUOTE_MARKS.sub("", line))[-_MAX_JOINED:]
    return line


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


class _Reader:
    """Reads log lines one at a time, keeping the facts and the furthest phase seen."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._values: dict[str, object] = {}
        self._prio: dict[str, int] = {}
        self._phase: Phase | None = None
        self._non_default: dict[str, object] | None = None
        self._args: dict[str, object] | None = None
        self._prev = ""  # the record so far, continuation lines appended

    def _set(self, key: str, value: object, prio: int) -> bool:
        if prio < self._prio.get(key, -1) or self._values.get(key) == value:
            return False
        old = self._values.get(key)
        if key in _SMALLEST_WINS and prio == self._prio.get(key) and isinstance(old, float | int):
            if isinstance(value, float | int) and value >= old:
                return False
        self._values[key], self._prio[key] = value, prio
        return True

    def feed(self, line: str) -> bool:
        """Read one line; True when a fact or the phase changed."""
        if " HTTP/" in line and self._phase is not None and _ACCESS.search(line):
            self._prev = line  # the next line does not continue it
            return False
        line = _BOLD_FIGURE.sub(r"\1", plain(line))  # markdown bold around a figure in an issue thread
        if _NEW_RUN.search(line) and "vllm_version" in self._values:
            self.reset()  # a new run appended to the same log
        changed = False
        if self._phase is None:
            self._phase, changed = Phase.SPAWNED, True
        phase = phase_of(line) or (Phase.CAPTURING_GRAPHS if _V0_CAPTURE.search(line) else None)
        if phase is not None and phase.advances(self._phase):
            self._phase, changed = phase, True
        if _EXTENDED.search(line):
            for key in _STALE_AFTER_EXTENSION:
                changed |= self._values.pop(key, None) is not None
                self._prio.pop(key, None)
        for pattern, groups in _RULES:
            m = pattern.search(line) or across_wrap(pattern, self._prev, line)
            if m is None:
                continue
            for i, (key, convert, prio) in enumerate(groups, start=1):
                if m.group(i) is None:  # an optional part the line lacks (a message cut short)
                    continue
                try:
                    changed |= self._set(key, convert(m.group(i)), prio)
                except ValueError:
                    pass
        for pattern, engine, prio in _ENGINE_RULES:
            if pattern.search(line):
                changed |= self._set("engine", engine, prio)
                break
        if m := _NON_DEFAULT.search(line) or _NON_DEFAULT_CUT.search(line):
            self._non_default, changed = _dict_of(m.group(1)), True
        elif m := _NAMESPACE.search(line):
            self._args, changed = {k: _literal(v) for k, v in _NS_PAIR.findall(m.group(1))}, True
        self._prev = extend_record(self._prev, line)
        return changed

    @property
    def phase(self) -> Phase | None:
        return self._phase

    @property
    def facts(self) -> StartupFacts:
        values: dict[str, Any] = {k: v for k, v in self._values.items() if not k.startswith("_")}
        facts = StartupFacts(
            non_default_args=MappingProxyType(self._non_default) if self._non_default is not None else None,
            args=MappingProxyType(self._args) if self._args is not None else None,
            phase=self._phase,
        )
        return _derive(replace(facts, **values), self._values)


def _derive(facts: StartupFacts, raw: Mapping[str, object]) -> StartupFacts:
    """Fill what follows from what was read: launch args, V0's activation peak, tokens from blocks."""
    extra: dict[str, Any] = {}  # fact name -> value of that field's type
    if facts.max_model_len is None and isinstance(facts.arg("max_model_len"), int):
        extra["max_model_len"] = facts.arg("max_model_len")
    model = facts.arg("model")
    if facts.model is None and isinstance(model, str) and model:
        extra["model"] = model
    util = facts.arg("gpu_memory_utilization")
    if facts.gpu_memory_utilization is None and isinstance(util, float | int) and not isinstance(util, bool):
        extra["gpu_memory_utilization"] = float(util)
    peak = raw.get("_peak_torch_gib")
    if facts.activation_peak_gib is None and isinstance(peak, float) and facts.model_weights_gib is not None:
        extra["activation_peak_gib"] = round(max(0.0, peak - facts.model_weights_gib), 2)
    if facts.kv_cache_tokens is None and facts.num_gpu_blocks is not None:
        block = facts.arg("block_size")
        extra["kv_cache_tokens"] = facts.num_gpu_blocks * (
            block if isinstance(block, int) else _V0_DEFAULT_BLOCK_SIZE
        )
    if facts.engine is None and facts.vllm_version and _version_tuple(facts.vllm_version) < (0, 8):
        extra["engine"] = "V0"  # V1 was opt-in before 0.8
    if not extra:
        return facts
    return replace(facts, **extra)


def parse_startup(lines: Iterable[str]) -> StartupFacts:
    """The facts of a whole log (the last run in it, when several were appended)."""
    reader = _Reader()
    for line in lines:
        reader.feed(line)
    return reader.facts
