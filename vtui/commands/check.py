"""`vtui check [LAYOUT]`: validate a layout without starting anything.

Prints every problem (`file:line: dotted.key: message`, one per line) and exits 2 when there is any;
prints warnings (network-exposed host, literal secrets, known killers of vLLM processes installed or running
on this machine: supervisor.killers) and the seeds' advice on the flags; exits 0 with a one-line summary when
usable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vtui.core.advice import flag_advice
from vtui.core.model import InstanceSpec
from vtui.core.vllm_memory import memory_rule
from vtui.layouts import LayoutError, LayoutProblem, load_layout_with_warnings, resolve_layout_arg
from vtui.layouts.text import LineIndex
from vtui.supervisor.killers import warnings as killer_warnings
from vtui.telemetry import flagschema

HELP = "validate a layout file: every problem with file:line and key (exit 2 on errors)"

EXIT_INVALID = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "layout", nargs="?", help="layout file or shipped name, e.g. demo (default: the session last used)"
    )


def run(args: argparse.Namespace) -> int:
    try:
        path = resolve_layout_arg(args.layout)
        # each vllm instance's flags are checked against its own vLLM's parser (read once per version)
        schemas = flagschema.layout_schemas(path, notify=lambda line: print(line, file=sys.stderr))
        layout, warnings = load_layout_with_warnings(path, flags=flagschema.union_table(schemas.values()))
    except LayoutError as exc:
        for problem in exc.problems:
            print(problem if exc.problems[0].file != "vtui" else exc)
        for warning in exc.warnings:
            print(f"warning: {warning}")
        count = len(exc.problems)
        print(f"{count} problem{'s' if count != 1 else ''}; nothing was started", file=sys.stderr)
        return EXIT_INVALID
    warnings = [*warnings, *killer_warnings()]
    for warning in warnings:
        print(f"warning: {warning}")
    wrong: list[LayoutProblem] = []
    lines = LineIndex(Path(path).read_text(encoding="utf-8", errors="replace"))
    for index, spec in enumerate(layout.instances):
        refused = _sim_refusal(spec)
        if refused:
            key = f"instance[{index}].model"
            wrong.append(LayoutProblem(str(path), lines.line_of(key), key, refused))
        schema = schemas.get(spec.name) or flagschema.schema_for(spec.engine, spec.command)
        # the bundled schema is the default: said only when it is not; a guess (the newest bundled one)
        # is said in the loader's warning on each flag it does not know
        if schema.source != "builtin" and not schema.guessed:
            print(f"{spec.name}: {schema.label()}")
        for name, why in flagschema.unknown_flags(spec.flags, schema):
            key = f"instance[{index}].flags.{name}"
            wrong.append(LayoutProblem(str(path), lines.line_of(key), key, why))
    if wrong:
        print("\n".join(map(str, wrong)))
        print(f"{len(wrong)} problem{'s' if len(wrong) != 1 else ''}; nothing was started", file=sys.stderr)
        return EXIT_INVALID
    for spec in layout.instances:
        too_long = _over_model_limit(spec)
        if too_long:
            warnings.append(too_long)
            print(f"warning: {too_long}")
    for spec in layout.instances:
        schema = schemas.get(spec.name) or flagschema.schema_for(spec.engine, spec.command)
        rule = (  # the target vLLM's reading of a utilization; a guessed schema's release is no target
            None
            if schema.guessed
            else memory_rule(
                spec.flags,
                schema.vllm_version,
                "cuda",  # the backend vLLM's GPU defaults are written for
                default_utilization=schema.flags["gpu-memory-utilization"].default
                if "gpu-memory-utilization" in schema.flags
                else None,
            )
        )
        for line in flag_advice(spec.flags, rule):
            print(f"advice: {spec.name}: {line}")
    instances = ", ".join(_summary(s) for s in layout.instances)
    for spec in layout.instances:
        reason = spec.not_supervised_yet()
        if reason:
            print(f"note: {reason}")
    from vtui.supervisor import replicas

    for spec in layout.instances:
        alternative = replicas.data_parallel_alternative(spec)
        if alternative:
            print(f"note: {alternative}")
    routed = [s.name for s in layout.instances if s.replicas > 1 and s.router_port is not None]
    if routed:
        if not replicas.router_installed():
            print(
                f"note: {', '.join(routed)}: replicas behind a router need vllm-router, not installed "
                f"for {sys.executable}: pip install 'vtui[router]' (or vllm-router)"
            )
    count = len(layout.instances)
    print(
        f'{path}: OK: session "{layout.session.name}", {count} instance{"s" if count != 1 else ""}: '
        f"{instances}" + (f"; {len(warnings)} warning(s)" if warnings else "")
    )
    return 0


def _sim_refusal(spec: InstanceSpec) -> str | None:
    """A sim instance whose model its start would refuse (vtui.sim.models.start_refusal)."""
    if spec.engine != "sim" or spec.command:
        return None
    from vtui.sim.models import start_refusal

    params = spec.flags.get("sim-params")
    return start_refusal(spec.model, params if isinstance(params, str) else None)


def _summary(spec: InstanceSpec) -> str:
    """`name (engine :port gpus 0,1)`; an attached server by its URL; replicas with their ports, GPU sets
    and router."""
    if spec.engine == "external":
        return f"{spec.name} (external {spec.base_url})"
    if spec.replicas > 1:
        sets = spec.replica_gpu_sets()
        gpus = " gpus " + "|".join(",".join(map(str, g)) for g in sets) if any(sets) else ""
        router = f", router :{spec.router_port}" if spec.router_port else ""
        if spec.router_port and spec.router_metrics_port:
            router += f" (metrics :{spec.router_metrics_port})"
        last = spec.port + spec.replicas - 1
        return f"{spec.name} ({spec.engine} ×{spec.replicas} :{spec.port}-{last}{gpus}{router})"
    gpus = " gpus " + ",".join(map(str, spec.gpus)) if spec.gpus else ""
    return f"{spec.name} ({spec.engine} :{spec.port}{gpus})"


def _over_model_limit(spec: InstanceSpec) -> str | None:
    """`max-model-len` past the model's own limit, read from its config.json on disk (a folder or the
    Hugging Face cache; the sim's table for a sim), or None (nothing on disk to read is no warning)."""
    from vtui.core.flagvalues import int_flag
    from vtui.planner.config import model_config_for, over_model_limit

    wanted = int_flag(spec.flags.get("max-model-len"))
    if spec.engine == "external" or wanted is None or wanted <= 0:
        return None
    if spec.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1":
        return None
    config, _ = model_config_for(spec.engine, spec.model)
    problem = over_model_limit(config, wanted) if config is not None else None
    return f"{spec.name}: {problem} ({config.source})" if problem and config is not None else None
