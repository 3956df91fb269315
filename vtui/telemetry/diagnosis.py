"""vLLM failure lines → plain explanations and concrete flag fixes vtui can apply; and, at run time, the
"KV cache short" pattern in metrics. The root cause of a failed V1 start sits in the
`(EngineCore… pid=…)` lines above `Engine core initialization failed`; every line is read, and each
problem is reported once.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol

from vtui.core.flagvalues import int_flag
from vtui.core.phases import phase_of, root_cause
from vtui.core.state import Phase
from vtui.core.vllm_memory import MemoryRule, memory_rule
from vtui.telemetry.facts import StartupFacts, memory_text
from vtui.telemetry.gpu import GpuSample
from vtui.telemetry.metrics import MetricsSample
from vtui.telemetry.remedies import (
    describe_holders,
    free_port_after,
    gpu_holders,
    kv_short_remedies,
    port_holders,
    utilization_that_fits,
)

__all__ = [
    "NOT_RETRIED",
    "KvShortWatch",
    "Problem",
    "diagnose",
    "diagnose_runtime",
    "not_worth_retrying",
    "run_memory_rule",
]

# Startup failures that the same flags on the same machine meet again: a policy restart would only
# repeat them (and spend the restart budget), so the instance goes straight to FAILED with the fix.
# Not here: a port or the GPUs' free memory taken by another process (that may end), a cause not known.
NOT_RETRIED = frozenset(
    {
        "kv_too_small_for_max_model_len",
        "no_kv_memory",
        "cuda_oom",
        "unknown_flag",
        "invalid_flag_value",
        "max_model_len_above_model",
        "model_not_found",
        "cpu_reservation_below_footprint",
        "cpu_memory_short_for_kv",
    }
)


@dataclass(frozen=True)
class Problem:
    kind: str
    message: str  # vLLM's own words, or vtui's summary of the figures
    fix: Mapping[str, object] | None  # flag -> value vtui can apply; None when no flag change fixes it
    explanation: str
    remedies: tuple[str, ...] = ()  # everything worth trying, in order (the fix is the first that applies)
    pids: tuple[int, ...] = ()  # processes holding the port / the GPUs, when known

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "message": self.message,
            "fix": dict(self.fix) if self.fix is not None else None,
        }


def _fix(**flags: object) -> Mapping[str, object]:
    return MappingProxyType({k.replace("_", "-"): v for k, v in flags.items()})


@dataclass
class _Context:
    facts: StartupFacts
    gpu: GpuSample | None
    gpu_indices: Sequence[int] | None
    instance: str | None
    own_pids: Collection[int]
    holders_of_port: Callable[[int], list[tuple[int, str]]]
    phase: Phase | None = None  # the phase reached when the failure line was read
    log_pids: frozenset[int] = frozenset()  # vLLM's own processes, from the "(EngineCore pid=…)" prefixes


_Detector = tuple[re.Pattern[str], Callable[[re.Match[str], _Context], Problem]]


def _kv_v1(m: re.Match[str], ctx: _Context) -> Problem:
    want, needed = int(m.group(1)), float(m.group(2))
    if m.group(3) is None:  # a paste cut the message before the available memory
        return Problem(
            "kv_too_small_for_max_model_len",
            m.group(0).strip(),
            None,
            f"One request of max_model_len={want} tokens needs {memory_text(needed)} of KV cache, more than is left "
            "after weights and activations. Lower --max-model-len (the full message gives vLLM's estimate), or give "
            "the KV cache more memory (higher --gpu-memory-utilization, fewer other processes on the GPU).",
        )
    available = float(m.group(3))
    estimate = int(m.group(4)) if m.group(4) else None
    if estimate is None and needed > 0:  # before vLLM 0.9 the message gave no estimate: scale and round down
        estimate = int(want * available / needed) // 16 * 16 or None
    return Problem(
        "kv_too_small_for_max_model_len",
        m.group(0).rstrip(". "),
        _fix(max_model_len=estimate) if estimate else None,
        f"One request of max_model_len={want} tokens needs {memory_text(needed)} of KV cache, but only "
        f"{memory_text(available)} is left after weights and activations. Lower --max-model-len"
        + (
            f" to {estimate} (vLLM's own estimate)"
            if m.group(4)
            else f" to about {estimate}"
            if estimate
            else ""
        )
        + ", or give the KV cache more memory (higher --gpu-memory-utilization, fewer other processes on the GPU).",
    )


def _kv_v0(m: re.Match[str], ctx: _Context) -> Problem:
    want = int(m.group(1))
    if m.group(2) is None:  # the capacity was cut off
        return Problem(
            "kv_too_small_for_max_model_len",
            m.group(0),
            None,
            f"The KV cache holds fewer tokens than one request of max_model_len={want}. Lower --max-model-len "
            "to what it holds (the full message gives the figure), or raise --gpu-memory-utilization.",
        )
    capacity = int(m.group(2))
    return Problem(
        "kv_too_small_for_max_model_len",
        m.group(0),
        _fix(max_model_len=capacity),
        f"The KV cache holds {capacity} tokens, fewer than one request of max_model_len={want}. Set "
        f"--max-model-len {capacity}, or raise --gpu-memory-utilization.",
    )


def _no_kv(m: re.Match[str], ctx: _Context) -> Problem:
    facts = ctx.facts
    explicit = facts.arg("kv_cache_memory_bytes")
    util = facts.gpu_memory_utilization
    seqs = facts.arg("max_num_seqs")
    remedies = [
        "lower --max-num-seqs (the profiling batch, hence the activation peak, shrinks with it)",
        "set --enforce-eager (no CUDA graph memory)",
        "raise --gpu-memory-utilization, as vLLM suggests, if the GPU has room",
    ]
    if isinstance(explicit, int) and explicit > 0:
        fix = _fix(kv_cache_memory_bytes=max(64 * 1024**2, explicit * 10))
        why = (
            f"--kv-cache-memory-bytes {explicit} is smaller than one KV cache block per layer. Give it more "
            "(vtui proposes at least 64 MiB; vLLM then reports the tokens it holds)."
        )
        remedies.insert(0, "raise --kv-cache-memory-bytes")
    elif isinstance(util, float) and util < 0.9:
        fix = _fix(gpu_memory_utilization=0.9)
        why = (
            f"Weights and activations fill the whole --gpu-memory-utilization {util:g} budget, leaving nothing "
            "for the KV cache. Raise the budget to 0.9, or lower --max-num-seqs / set --enforce-eager."
        )
    else:
        new_seqs = max(1, (seqs if isinstance(seqs, int) else 256) // 2)
        fix = _fix(max_num_seqs=new_seqs, enforce_eager=True)
        why = (
            "Weights, activations and CUDA graphs fill the whole memory budget, leaving nothing for the KV "
            f"cache. Shrink the activation peak (--max-num-seqs {new_seqs}) and skip CUDA graphs "
            "(--enforce-eager); a bigger budget or a smaller / quantized model also helps."
        )
    # Other processes on the instance's GPUs (an instance without gpus runs on GPU 0) shrink what is left.
    indices = ctx.gpu_indices if ctx.gpu_indices is None or ctx.gpu_indices else [0]
    holders = gpu_holders(ctx.gpu, indices, instance=ctx.instance, own_pids=ctx.own_pids)
    if holders:
        why += f" Also on its GPU: {describe_holders(holders)}."
        remedies.append("stop " + ", ".join(f"PID {p.pid}" for p in holders) + " to free their memory")
    return Problem("no_kv_memory", m.group(0), fix, why, tuple(remedies), tuple(p.pid for p in holders))


_OOM_PROCESS = re.compile(r"Process (\d+) has ([\d.]+ [GM]iB) memory in use")


def _oom(m: re.Match[str], ctx: _Context) -> Problem:
    line = m.string
    others = [
        f"PID {pid} holds {mem}"
        for pid, mem in _OOM_PROCESS.findall(line)
        if int(pid) not in ctx.log_pids and int(pid) not in ctx.own_pids
    ]  # CUDA lists vLLM itself too
    util = ctx.facts.gpu_memory_utilization or 0.9
    remedies = [
        f"lower --gpu-memory-utilization to {round(util - 0.05, 2):g}",
        "lower --max-num-seqs / --max-num-batched-tokens",
        "set --enforce-eager",
    ]
    if ctx.phase is Phase.CAPTURING_GRAPHS:
        fix = _fix(enforce_eager=True)
        why = "The GPU ran out of memory while capturing CUDA graphs. --enforce-eager skips them (slower decode)."
        remedies = [remedies[2], remedies[0], remedies[1]]
    else:
        fix = _fix(gpu_memory_utilization=round(util - 0.05, 2))
        why = (
            "CUDA ran out of memory outside vLLM's budget (activations, CUDA graphs, other processes). Lower "
            "--gpu-memory-utilization to leave headroom, or lower --max-num-seqs, or set --enforce-eager."
        )
    if others:
        why += " " + "; ".join(others) + "."
    message = line[m.start() :].strip()
    return Problem("cuda_oom", message[:300], fix, why, tuple(remedies))


def _free_memory(m: re.Match[str], ctx: _Context) -> Problem:
    cpu = m.group("node") is not None
    free, total, util = float(m.group("free")), float(m.group("total")), float(m.group("util"))
    device = m.group("dev")
    indices: Sequence[int] | None = ctx.gpu_indices
    if indices is None and device and device.startswith("cuda:"):
        indices = [int(device[5:])]
    holders = [] if cpu else gpu_holders(ctx.gpu, indices, instance=ctx.instance, own_pids=ctx.own_pids)
    lower = utilization_that_fits(free, total)
    where = f"node {m.group('node')}" if cpu else (f"GPU {device}" if device else "the GPU")
    why = (
        f"Only {memory_text(free)} of {memory_text(total)} is free on {where}, but --gpu-memory-utilization "
        f"{util:g} asks for {memory_text(util * total)} when vLLM starts."
    )
    remedies = []
    if holders:
        why += f" Held by {describe_holders(holders)}."
        remedies.append("stop " + ", ".join(f"PID {p.pid}" for p in holders))
    elif not cpu:
        why += " Another process (or an instance still starting on the same GPU) holds the rest."
    if lower is not None:
        remedies.append(f"lower --gpu-memory-utilization to {lower:g}")
    if cpu:
        remedies.append(
            "set --kv-cache-memory-bytes (CPU builds size the cache from it, not from utilization)"
        )
    return Problem(
        "free_memory_below_utilization",
        m.group(0),
        _fix(gpu_memory_utilization=lower) if lower else None,
        why,
        tuple(remedies),
        tuple(p.pid for p in holders),
    )


def _port(m: re.Match[str], ctx: _Context) -> Problem:
    port_arg = ctx.facts.arg("port")
    port = int(m.group(2)) if m.group(2) else port_arg if isinstance(port_arg, int) else 8000
    host_arg = ctx.facts.arg("host")
    holders = ctx.holders_of_port(port)
    alternative = free_port_after(port, host_arg if isinstance(host_arg, str) else "")
    who = ", ".join(f"PID {pid} ({name})" for pid, name in holders) if holders else "another process"
    remedies = [f"stop {who}" if holders else "stop whatever listens there"]
    if alternative:
        remedies.append(f"use --port {alternative}")
    return Problem(
        "port_in_use",
        f"port {port} is already in use by {who}",
        _fix(port=alternative) if alternative else None,
        f"vLLM could not bind its HTTP port {port}: {who} listens there.",
        tuple(remedies),
        tuple(pid for pid, _ in holders),
    )


def _known_flags() -> list[str]:
    try:
        from vtui.core.flagspec import BUILTIN_FLAGS
    except Exception:  # noqa: BLE001 — did-you-mean is a nicety
        return []
    return list(BUILTIN_FLAGS)


def _unknown_flag(m: re.Match[str], ctx: _Context) -> Problem:
    flags = re.findall(r"--([\w-]+)", m.group(2))
    known = _known_flags()
    hints = []
    for flag in flags:
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
        if close:
            hints.append(f"--{flag}: did you mean --{close[0]}?")
    return Problem(
        "unknown_flag",
        m.group(1),
        None,
        "This vLLM does not know "
        + ", ".join(f"--{f}" for f in flags or ["that flag"])
        + " (flags change between versions; `vllm serve --help=all` lists this one's).",
        tuple(hints),
    )


def _bad_value(m: re.Match[str], ctx: _Context) -> Problem:
    return Problem(
        "invalid_flag_value", m.group(1), None, f"vLLM rejected the value of {m.group(2)}: {m.group(3)}"
    )


def _max_len(m: re.Match[str], ctx: _Context) -> Problem:
    numbers = [float(v) for v in re.findall(r"=\s*([\d.]+)", m.group(2))]
    limit = int(min(numbers)) if numbers else None
    return Problem(
        "max_model_len_above_model",
        m.group(0),
        _fix(max_model_len=limit) if limit else None,
        f"--max-model-len {m.group(1)} is longer than the model supports ({m.group(2).split(' in ')[0]}). "
        + (f"Use {limit}." if limit else "Use the model's limit.")
        + " VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 overrides this at the risk of wrong outputs.",
    )


def _model_missing(m: re.Match[str], ctx: _Context) -> Problem:
    return Problem(
        "model_not_found",
        m.group(0).strip()[:300],
        None,
        "vLLM could not find the model: check the path or Hugging Face id (and HF_TOKEN for gated "
        "models, HF_HUB_OFFLINE for offline use).",
    )


def _metal_no_kv(m: re.Match[str], ctx: _Context) -> Problem:
    """vllm-metal's paged attention (Apple silicon): weights and overhead fill the Metal budget."""
    facts = ctx.facts
    figures = ""
    if facts.total_gpu_gib is not None and facts.gpu_memory_utilization is not None:
        figures = (
            f" Of the {memory_text(facts.total_gpu_gib)} Metal working set, the fraction "
            f"{facts.gpu_memory_utilization:g} is usable"
            + (
                f"; the weights take {memory_text(facts.model_weights_gib)}"
                if facts.model_weights_gib
                else ""
            )
            + (
                f", leaving {memory_text(facts.available_kv_gib)}"
                if facts.available_kv_gib is not None
                else ""
            )
            + "."
        )
    return Problem(
        "no_kv_memory",
        m.group(0),
        None,
        "vllm-metal found no Metal memory left for the KV cache."
        + figures
        + " Raise VLLM_METAL_MEMORY_FRACTION "
        "(or --gpu-memory-utilization when it is auto), use a smaller or more quantized model, or lower "
        "--max-num-seqs.",
        (
            "raise VLLM_METAL_MEMORY_FRACTION (or --gpu-memory-utilization while the variable is auto)",
            "use a smaller or more quantized model",
            "lower --max-num-seqs (1 for a single user)",
        ),
    )


def _cpu_footprint(m: re.Match[str], ctx: _Context) -> Problem:
    """vLLM 0.33's CPU backend (v1/worker/cpu_worker.py): the worker's own memory fills its reservation."""
    used, reserved = float(m.group(1)), float(m.group(2))
    needed = float(m.group(4)) if m.group(4) else None
    util = round(min(0.99, needed + 0.05), 2) if needed is not None else None
    why = (
        f"The model and runtime already use {memory_text(used)}, more than the {memory_text(reserved)} of CPU memory "
        "--gpu-memory-utilization reserves on the CPU backend: nothing is left for the KV cache."
    )
    return Problem(
        "cpu_reservation_below_footprint",
        m.group(0),
        _fix(gpu_memory_utilization=util) if util is not None else None,
        why,
        (
            f"raise --gpu-memory-utilization to {util:g}"
            if util is not None
            else "raise --gpu-memory-utilization",
            "set --kv-cache-memory-bytes (or VLLM_CPU_KVCACHE_SPACE) to size the cache directly",
        ),
    )


def _cpu_kv_short(m: re.Match[str], ctx: _Context) -> Problem:
    """The CPU backend's KV allocation (0.32 and 0.33): less free memory on the node than the cache needs."""
    free, total, wanted = float(m.group(2)), float(m.group(3)), float(m.group(4))
    explicit = ctx.facts.arg("kv_cache_memory_bytes")
    fits = int(free * 0.9 * 2**30)
    why = (
        f"Only {memory_text(free)} of {memory_text(total)} is free on node {m.group(1)}, but the KV cache needs "
        f"{memory_text(wanted)}. "
        "Other processes hold the rest, or the reservation is too large."
    )
    fix = _fix(kv_cache_memory_bytes=fits) if isinstance(explicit, int) and fits > 0 else None
    return Problem(
        "cpu_memory_short_for_kv",
        m.group(0),
        fix,
        why,
        (
            f"set --kv-cache-memory-bytes to at most {fits} ({memory_text(free * 0.9)})",
            "lower --gpu-memory-utilization (on the CPU backend it reserves CPU memory)",
            "free CPU memory used by other processes",
        ),
    )


def _preempted(m: re.Match[str], ctx: _Context) -> Problem:
    return _kv_short(
        "vLLM preempted requests: not enough KV cache space", None, None, run_memory_rule(ctx.facts)
    )


_DETECTORS: tuple[_Detector, ...] = tuple(
    (re.compile(p), f)
    for p, f in (
        (
            r"To serve at least one request with the models?'s max seq len \((\d+)\),\s*\(?([\d.]+) GiB KV cache is "
            r"needed(?:, which is larger than the available KV cache memory \(([\d.]+) GiB\)\.?"
            r"(?:\s*Based on the available memory,\s*the estimated maximum model length is (\d+))?|[^.]*$)",
            _kv_v1,  # or cut short after "is needed" by a paste
        ),
        (r"Paged attention: not enough Metal memory for KV cache", _metal_no_kv),
        (
            r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV "
            r"cache \((?:(\d+)\)|$)",  # a paste may end before the capacity
            _kv_v0,
        ),
        (r"No available memory for the cache blocks", _no_kv),
        (r"(?:torch\.(?:cuda\.)?OutOfMemoryError: )?CUDA out of memory|CUDA error: out of memory", _oom),
        (
            r"(?:Free memory on device ?(?P<dev>[\w:]*)|Available memory on node (?P<node>\d+)) \((?P<free>[\d.]+)/"
            r"(?P<total>[\d.]+) GiB\) on startup is less than desired (?:GPU|CPU) memory utilization \((?P<util>[\d.]+)"
            r", [\d.]+ GiB\)",
            _free_memory,
        ),
        (
            r"\[Errno (?:98|48|10048)\] (?:error while attempting to bind on address \('([^']*)', (\d+)\): )?"
            r"(?:\[[Ee]rrno \d+\] )?[Aa]ddress already in use",
            _port,
        ),
        (r"(vllm(?: serve)?: error: unrecognized arguments: (.*))$", _unknown_flag),
        (r"(vllm(?: serve)?: error: argument (--[\w-]+)[^:]*: (.*))$", _bad_value),
        (
            r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len \(([^)]*)\)",
            _max_len,
        ),
        (
            r"(?:HFValidationError|RepositoryNotFoundError): .*|\S*(?: is not a local folder and is not a valid model "
            r"identifier| does not appear to have a file named config\.json).*",
            _model_missing,
        ),
        (r"is preempted by PreemptionMode\.\w+ mode because there is not enough KV cache space", _preempted),
        (
            r"The worker already uses ([\d.]+) GiB \(model weights and runtime\), more than the ([\d.]+) GiB of "
            r"CPU memory reserved for it on node (\d+)(?:.*?increase `--gpu-memory-utilization` to more than "
            r"([\d.]+))?",
            _cpu_footprint,
        ),
        (
            r"Available memory on node (\d+) \(([\d.]+)/([\d.]+) GiB\) on kv cache allocation is less than "
            r"requested memory for kv \(([\d.]+)(?:/[\d.]+)? GiB\)",
            _cpu_kv_short,
        ),
    )
)
_LOG_PID = re.compile(
    r"^\((?:[\w =-]+) pid=(\d+)(?:, ip=[\d.]+)?\)", re.M
)  # "(VllmWorker rank=3 pid=…)", Ray's ip
_FAILED = re.compile(
    r"Traceback \(most recent call last\)|initialization failed|failed to start|: error: |"
    r"Worker proc \S+ died unexpectedly"
)
# what precedes a record's message: process prefix, level, date, time, [file:line]
_LOG_PREFIX = re.compile(r"^.*?\b(?:ERROR|CRITICAL)\s+\d\d-\d\d\s+[\d:]+\s+(?:\[[^\]]*\]\s*)?")


def diagnose(
    lines: Iterable[str],
    facts: StartupFacts | None = None,
    *,
    gpu: GpuSample | None = None,
    gpu_indices: Sequence[int] | None = None,
    instance: str | None = None,
    own_pids: Collection[int] = (),
    holders_of_port: Callable[[int], list[tuple[int, str]]] = port_holders,
) -> list[Problem]:
    """Every recognised problem in a (failed) startup log, in the order first seen. `gpu` (a current
    GpuSample), `gpu_indices` (the instance's GPUs), `instance` and `own_pids` let a memory problem name
    the processes holding those GPUs."""
    # here, not at import: the dashboard imports this module for diagnose_runtime at its first samples
    from vtui.telemetry.startup_log import across_wrap, extend_record, parse_startup, plain

    lines = [plain(line) for line in lines]
    ctx = _Context(
        facts if facts is not None else parse_startup(lines),
        gpu,
        gpu_indices,
        instance,
        own_pids,
        holders_of_port,
        log_pids=frozenset(int(p) for p in _LOG_PID.findall("\n".join(lines))),
    )
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    failed_at: str | None = None  # the first line that says the start failed
    record = ""  # the log record so far: a pasted log's wrapped lines joined back
    for line in lines:
        phase = phase_of(line)
        if phase is not None:
            ctx.phase = phase
        # A traceback once the server is up (a request's error, the teardown after SIGTERM: EngineDeadError)
        # is no failure to start; a later run's startup phases start counting again.
        if failed_at is None and ctx.phase is not Phase.API_UP and _FAILED.search(line):
            failed_at = line
        for pattern, build in _DETECTORS:
            m = pattern.search(line) or across_wrap(pattern, record, line)
            if m is None:
                continue
            key = (build.__name__, m.group(0) if build is not _preempted else "")  # one preemption report
            if key in seen:
                break
            seen.add(key)
            problem = build(m, ctx)
            # a message read cut at a line's end, then whole once the next line joined it: keep the whole one
            cut = next(
                (i for i, p in enumerate(problems) if p.kind == problem.kind and _completes(problem, p)), None
            )
            if cut is not None:
                problems[cut] = problem
            elif not any(p.kind == problem.kind and p.message == problem.message for p in problems):
                problems.append(problem)
            break
        record = extend_record(record, line)
    if not problems and failed_at is not None:
        cause = root_cause(lines) or _LOG_PREFIX.sub("", failed_at).strip()
        problems.append(
            Problem("startup_failed", cause, None, "vLLM failed to start; this is the root cause it logged.")
        )
    return problems


def _completes(whole: Problem, cut: Problem) -> bool:
    """True when `whole` is the message `cut` was read from before a paste's next line gave the rest."""
    return len(whole.message) > len(cut.message) and whole.message.startswith(cut.message)


def run_memory_rule(
    facts: StartupFacts | None, flags: Mapping[str, object] | None = None, backend: str = "cuda"
) -> MemoryRule | None:
    """The memory rule a run followed (`core.vllm_memory.memory_rule`), from its log: its vLLM version,
    and "Extended KV cache to …" (`facts.extended_kv_gib`) as proof of 0.34's extensible KV cache. None
    when the log names no version and shows no extended cache."""
    if facts is None or (facts.vllm_version is None and facts.extended_kv_gib is None):
        return None
    given = dict(flags or {})
    util = facts.arg("gpu_memory_utilization")
    if "gpu-memory-utilization" not in given and isinstance(util, float | int) and not isinstance(util, bool):
        given["gpu-memory-utilization"] = util
    rule = memory_rule(given, facts.vllm_version, backend)
    if facts.extended_kv_gib is not None and not rule.extensible_kv:
        rule = replace(
            rule,
            extensible_kv=True,
            checks_free_memory=False,
            utilization=rule.utilization if rule.utilization_set else 1.0,
        )
    return rule


def _kv_short(
    message: str,
    running: float | None,
    flags: Mapping[str, object] | None,
    rule: MemoryRule | None = None,
) -> Problem:
    fix = _kv_short_fix(running, flags, rule) if flags is not None else None
    remedies = kv_short_remedies(rule)
    return Problem(
        "kv_cache_short",
        message,
        fix,
        "The KV cache is full while requests wait, so vLLM preempts running requests and recomputes them later: "
        "throughput drops and latency spikes. In order: " + "; ".join(t for _, t in remedies) + ".",
        tuple(t for _, t in remedies),
    )


KV_BYTES_STEP = 1.25  # a KV-short fix raises an explicit --kv-cache-memory-bytes by a quarter
MIB = 1024**2


def _kv_short_fix(
    running: float | None, flags: Mapping[str, object], rule: MemoryRule | None = None
) -> Mapping[str, object] | None:
    """The first of the seeds' remedies that a flag change can apply, given the instance's flags and its
    vLLM's memory rule. "Give KV more memory" raises --kv-cache-memory-bytes when it is set: vLLM then
    sizes the cache from it alone, and a higher --gpu-memory-utilization would buy nothing; an unset
    utilization is 1.0 with 0.34's extensible KV cache, and is not raised either."""
    max_len = flags.get("max-model-len")
    if isinstance(max_len, int) and max_len > 16384:
        return _fix(max_model_len=16384)
    kv_bytes = int_flag(flags.get("kv-cache-memory-bytes"))
    if kv_bytes is not None and kv_bytes > 0:
        return _fix(kv_cache_memory_bytes=-(-int(kv_bytes * KV_BYTES_STEP) // MIB) * MIB)  # whole MiB, up
    util = rule.utilization if rule is not None else flags.get("gpu-memory-utilization", 0.9)
    if kv_bytes is None and isinstance(util, float | int) and util < 0.92:
        return _fix(gpu_memory_utilization=0.92)
    seqs = flags.get("max-num-seqs", 256)
    if running and isinstance(seqs, int) and 1 <= int(running) < seqs:
        return _fix(max_num_seqs=int(running))
    if flags.get("kv-cache-dtype") in (None, "auto"):
        return _fix(kv_cache_dtype="fp8")
    return None


class _Counted(Protocol):
    """A sample in an instance's history, as much of it as the runtime diagnosis reads (a MetricsSample
    or the dashboard's HistoryPoint)."""

    @property
    def at(self) -> float: ...
    @property
    def preemptions_total(self) -> float | None: ...


class _Load(_Counted, Protocol):
    """What the KV-short watch reads of a sample (a MetricsSample or a HistoryPoint)."""

    @property
    def kv_usage(self) -> float | None: ...
    @property
    def waiting(self) -> float | None: ...
    @property
    def running(self) -> float | None: ...


KV_SHORT_ENTER = 0.95  # KV cache usage at or above this, with requests waiting: under pressure
KV_SHORT_LEAVE = 0.85  # below this, or nothing waiting: relieved
KV_SHORT_ENTER_S = 10.0  # pressure (with preemptions rising) this long before "KV cache short" shows
KV_SHORT_LEAVE_S = 30.0  # relief this long before it goes


def _short_message(point: _Load, rate: float | None) -> str:
    usage, waiting = point.kv_usage or 0.0, point.waiting or 0.0
    return f"KV cache {usage:.0%} full, {waiting:g} waiting" + (f", {rate:.1f} preemptions/s" if rate else "")


def diagnose_runtime(
    sample: MetricsSample,
    history: Sequence[_Counted],
    flags: Mapping[str, object] | None = None,
    rule: MemoryRule | None = None,
) -> list[Problem]:
    """ "KV cache short" in one sample: usage >= 95% with requests waiting and preemptions rising (over
    `history`, the instance's recent samples, oldest first). `flags` (the instance's) makes the fix
    concrete; `rule` (its vLLM's memory rule, `run_memory_rule`) what raising the utilization can do.
    What the dashboard shows goes through `KvShortWatch`, which adds hysteresis."""
    if sample.kv_usage is None or sample.kv_usage < KV_SHORT_ENTER or not sample.waiting:
        return []
    rising = bool(sample.preemptions_per_s and sample.preemptions_per_s > 0)
    if not rising and sample.preemptions_total is not None:
        earlier = [
            h.preemptions_total for h in history if h.preemptions_total is not None and h.at < sample.at
        ]
        rising = bool(earlier) and sample.preemptions_total > min(earlier) and not sample.counter_reset
    if not rising:
        return []
    return [_kv_short(_short_message(sample, sample.preemptions_per_s), sample.running, flags, rule)]


class KvShortWatch:
    """ "KV cache short" with hysteresis, for one instance's samples in time order (their own `at`: the
    scraping supervisor's clock, so a replayed history decides as the live samples did).

    It shows once the cache has been under pressure (usage >= `enter` with requests waiting) for
    `enter_s`, with preemptions rising during that time, and no sample of relief (usage below `leave`,
    nothing waiting, or no usage reported) in between; a sample between the two thresholds neither
    starts nor breaks the run. Once shown, it goes only after `leave_s` of relief without one sample of
    pressure, or of a usage between the thresholds with requests waiting. So a cache that hovers around 95 %, or a queue that empties for a scrape, does not make the
    warning (and its fix key) come and go."""

    def __init__(
        self,
        *,
        enter: float = KV_SHORT_ENTER,
        leave: float = KV_SHORT_LEAVE,
        enter_s: float = KV_SHORT_ENTER_S,
        leave_s: float = KV_SHORT_LEAVE_S,
    ) -> None:
        if not leave <= enter:
            raise ValueError(f"the leave threshold {leave} is above the enter threshold {enter}")
        self.enter, self.leave, self.enter_s, self.leave_s = enter, leave, enter_s, leave_s
        self.reset()

    def reset(self) -> None:
        """Forget everything (the instance stopped serving, or runs other flags)."""
        self.problem: Problem | None = None
        self._pressed_since: float | None = None  # the unbroken run of pressure, shown or not
        self._base: float | None = None  # the preemption counter before that run
        self._preempted = False  # it rose during the run
        self._relieved_since: float | None = None  # relief while shown
        self._last_total: float | None = None
        self._last_at: float | None = None

    def observe(
        self,
        point: _Load,
        flags: Mapping[str, object] | None = None,
        preemptions_per_s: float | None = None,
        rule: MemoryRule | None = None,
    ) -> list[Problem]:
        """Take the next sample; the problem to show now ([] when none). A sample older than the last
        one is ignored; a preemption counter that went down (a new run) starts over."""
        if self._last_at is not None and point.at < self._last_at:
            return self.shown
        total = point.preemptions_total
        if total is not None and self._last_total is not None and total < self._last_total:
            self.reset()  # the counter restarted: another run of the server
        self._last_at = point.at
        usage, waiting = point.kv_usage, point.waiting or 0.0
        pressure = usage is not None and usage >= self.enter and waiting > 0
        relief = usage is None or usage < self.leave or waiting <= 0
        if pressure:
            if self._pressed_since is None:
                self._pressed_since = point.at
                self._base = self._last_total if self._last_total is not None else total
            rose = total is not None and self._base is not None and total > self._base
            self._preempted = self._preempted or rose or bool(preemptions_per_s and preemptions_per_s > 0)
            self._relieved_since = None
        elif relief:
            if self.problem is None:
                self._pressed_since, self._base, self._preempted = None, None, False
            elif self._relieved_since is None:
                self._relieved_since = point.at
        else:
            self._relieved_since = None  # between the thresholds: relief must be unbroken
        if total is not None:
            self._last_total = total
        if self.problem is not None:
            if (
                relief
                and self._relieved_since is not None
                and point.at - self._relieved_since >= self.leave_s
            ):
                self.reset()
                self._last_at, self._last_total = point.at, total
            elif pressure:
                self.problem = _kv_short(_short_message(point, preemptions_per_s), point.running, flags, rule)
        elif (
            pressure
            and self._preempted
            and self._pressed_since is not None
            and point.at - self._pressed_since >= self.enter_s
        ):
            self.problem = _kv_short(_short_message(point, preemptions_per_s), point.running, flags, rule)
        return self.shown

    @property
    def shown(self) -> list[Problem]:
        return [self.problem] if self.problem is not None else []


def not_worth_retrying(lines: Iterable[str]) -> Problem | None:
    """The problem of a failed start's log that a restart with the same flags would meet again (see
    NOT_RETRIED), or None: worth the restart policy's try."""
    return next((p for p in diagnose(lines, holders_of_port=lambda _port: []) if p.kind in NOT_RETRIED), None)
