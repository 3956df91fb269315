"""The KV planner as the UI uses it: a model config per instance (read from disk once, in a worker),
PlanParams from the edited flags, and the plan (or "--" with the reason) as text for the flag editor
and the detail screen's planned-vs-reported table. Textual-free, so it is unit-testable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.text import Text

from vtui.core.gpu import instance_gpus
from vtui.core.model import InstanceSpec, SessionSpec
from vtui.telemetry.gpu import GpuSample
from vtui.ui import fmt

if TYPE_CHECKING:  # the planner loads on first use (the fleet table's first frame needs none of it)
    from vtui.planner import ModelConfig, Plan, PlanParams
    from vtui.telemetry.startup_log import StartupFacts

GIB = 2**30


def config_key(spec: InstanceSpec) -> tuple[str, str, str | None]:
    sim_params = spec.flags.get("sim-params") if spec.engine == "sim" else None
    return (spec.engine, spec.model, str(sim_params) if sim_params is not None else None)


def load_config(key: tuple[str, str, str | None]) -> tuple[ModelConfig | None, str | None]:
    """(config, None) or (None, why not) for (engine, model, sim params). Blocking: call it in a thread."""
    from vtui.planner import model_config_for

    return model_config_for(*key)


def gpu_memory_gib(spec: InstanceSpec, session: SessionSpec, gpu_sample: GpuSample | None) -> float | None:
    """Memory per GPU: the smallest of the instance's GPUs as its GPU source shows them (`core.gpu
    .instance_gpus`: NVML / AMD SMI for vLLM, the simulated box for a sim), else the session's override."""
    if gpu_sample is not None:
        smallest = instance_gpus(spec, gpu_sample).smallest_total
        if smallest:
            return smallest / GIB
    if session.gpu_memory_gib:
        return float(session.gpu_memory_gib)
    if spec.engine == "sim":
        return 80.0  # the sim's default --sim-gpu-memory-gib
    return None


def plan_params(
    flags: Mapping[str, object],
    gpu_gib: float | None,
    *,
    device: str = "cuda",
    kv_memory_bytes: int | None = None,
    kv_source: str | None = None,
    max_model_len: int | None = None,
    vllm_version: str | None = None,
) -> PlanParams:
    """PlanParams from `vllm serve` flags (invalid or unset values fall back to vLLM's defaults);
    `vllm_version`: the target vLLM's (its memory rule), None: the bundled 0.32's."""
    from vtui.planner import params_from_flags

    return params_from_flags(
        flags,
        gpu_gib,
        device=device,
        kv_memory_bytes=kv_memory_bytes,
        kv_source=kv_source,
        max_model_len=max_model_len,
        vllm_version=vllm_version,
    )


def device_of(spec: InstanceSpec, gpu_sample: GpuSample | None) -> str:
    """vLLM's CPU build when a real vLLM instance has no GPU to run on; the sim simulates GPUs."""
    if spec.engine == "sim" or spec.gpus:
        return "cuda"
    if gpu_sample is not None and not gpu_sample.available:
        return "cpu"
    return "cuda"


def try_plan(config: ModelConfig | None, params: PlanParams) -> tuple[Plan | None, str | None]:
    if config is None:
        return None, None
    try:
        from vtui.planner import plan

        return plan(config, params), None
    except (ValueError, ZeroDivisionError, TypeError) as exc:
        return None, f"planner: {exc}"


def plan_text(result: Plan | None, reason: str | None, max_num_seqs: object = None) -> Text:
    """The flag editor's planner panel: KV bytes/token, tokens, concurrency at max-model-len, fit."""
    out = Text("Planner ", style="bold")
    if result is None:
        why = (reason or "loading the model config...").replace("\u2014", "-")
        out.append(f"--  ({why})", style="dim")
        return out
    out.append(f"{result.model}  ", style="dim")
    out.append(f"KV {fmt.size(result.kv_bytes_per_token)}/token  ")
    out.append(f"KV tokens {fmt.tokens(result.kv_cache_tokens)}  ")
    conc = result.max_concurrency
    out.append(f"max concurrency at {result.max_model_len:,}: {fmt.num(conc, '.1f')}x")
    from vtui.planner import int_flag

    seqs = int_flag(max_num_seqs)
    if conc is not None and seqs and conc < seqs:
        out.append(f" (< max-num-seqs {seqs})", style="yellow")
    out.append("\n  ")
    budget = result.available_kv_gib
    out.append(
        f"KV budget {fmt.num(budget, '.2f')} GiB/GPU ({result.kv_budget_source})  "
        f"weights {result.weights_gib_per_gpu:.2f} GiB/GPU  "
    )
    if result.max_model_len_fits is None:
        out.append("max-model-len fit: -- (no GPU memory known)", style="dim")
    elif result.max_model_len_fits:
        out.append(
            f"max-model-len fits (longest {fmt.num(result.estimated_max_model_len, ',')})", style="green"
        )
    else:
        out.append(
            f"max-model-len {result.max_model_len:,} does NOT fit; longest that does: "
            f"{fmt.num(result.estimated_max_model_len, ',')}",
            style="bold red",
        )
    for warning in result.warnings[:2]:
        if "does not fit" not in warning:
            out.append(f"\n  ! {warning}", style="yellow")
    return out


def planned_for_run(
    config: ModelConfig | None, spec: InstanceSpec, facts: StartupFacts, gpu_gib: float | None, device: str
) -> tuple[Plan | None, str | None]:
    """What the planner predicts for a run's flags with the KV budget vLLM logged (exact when
    --kv-cache-memory-bytes was given), from the run's startup facts (the store's: it read them once, so
    opening the detail screen does not read the run's log again). Returns (plan, reason when none)."""
    if config is None:
        return None, None
    kv, source = facts.kv_memory_bytes, None
    if kv is not None:
        source = "log (exact)" if facts.kv_memory_exact else "log (0.01 GiB)"
    params = plan_params(
        spec.flags,
        gpu_gib,
        device=device,
        kv_memory_bytes=kv,
        kv_source=source,
        max_model_len=facts.max_model_len,
        vllm_version=facts.vllm_version,  # the run's own vLLM: its memory rule
    )
    return try_plan(config, params)


def _delta(planned: float | None, reported: float | None) -> str:
    if planned is None or reported is None or not reported:
        return ""
    diff = (planned - reported) / reported
    return "exact" if planned == reported else f"{diff:+.1%}"


def planned_vs_reported_text(result: Plan | None, reason: str | None, facts: StartupFacts | None) -> Text:
    """Planned (same flags, the logged KV budget) beside what vLLM reported at startup."""
    out = Text("Planned vs reported (same flags and KV budget)\n", style="bold")
    if result is None:
        out.append(
            f"  planned: --  ({reason or 'loading the model config...'})\n".replace("\u2014", "-"),
            style="dim",
        )
        return out
    from vtui.telemetry.startup_log import StartupFacts

    f = facts or StartupFacts()
    rows = (
        ("KV budget GiB/GPU", result.available_kv_gib, f.available_kv_gib, ".2f"),
        ("weights GiB/GPU", result.weights_gib_per_gpu, f.model_weights_gib, ".2f"),
        ("KV cache tokens", result.kv_cache_tokens, f.kv_cache_tokens, ","),
        ("KV blocks", result.num_gpu_blocks, f.num_gpu_blocks, ","),
        ("max concurrency", result.max_concurrency, f.max_concurrency, ".2f"),
        ("longest max-model-len", result.estimated_max_model_len, f.estimated_max_model_len, ","),
    )
    out.append(f"  {'':<24}{'planned':>12}{'reported':>12}  difference\n", style="dim")
    for label, planned, reported, spec in rows:
        if planned is None and reported is None:
            continue
        out.append(
            f"  {label:<24}{fmt.num(planned, spec):>12}{fmt.num(reported, spec):>12}  "
            f"{_delta(planned, reported)}\n"
        )
    out.append(f"  KV budget source: {result.kv_budget_source}\n", style="dim")
    return out
