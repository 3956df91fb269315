"""vLLM failure lines → plain explanations and concrete flag fixes vtui can apply (the run-time "KV
cache short" pattern in metrics is `telemetry.kvshort`'s). The root cause of a failed V1 start sits in the
`(EngineCore… pid=…)` lines above `Engine core initialization failed`; every line is read, and each
problem is reported once.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from vtui.core.phases import phase_of, root_cause
from vtui.core.state import Phase
from vtui.telemetry.facts import StartupFacts, memory_text
from vtui.telemetry.gpu import GpuSample
from vtui.telemetry.kvshort import kv_short, run_memory_rule
from vtui.telemetry.problems import Problem
from vtui.telemetry.problems import flag_fix as _fix
from vtui.telemetry.remedies import (
    describe_holders,
    free_port_after,
    gpu_holders,
    port_holders,
    utilization_that_fits,
)

__all__ = ["NOT_RETRIED", "Problem", "diagnose", "not_worth_retrying"]

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
    return kv_short(
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


def not_worth_retrying(lines: Iterable[str]) -> Problem | None:
    """The problem of a failed start's log that a restart with the same flags would meet again (see
    NOT_RETRIED), or None: worth the restart policy's try."""
    return next((p for p in diagnose(lines, holders_of_port=lambda _port: []) if p.kind in NOT_RETRIED), None)
