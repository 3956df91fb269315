"""`vtui tune`'s setup: what a tune needs, gathered from the supervisor's view of the instance (or the
recorded tune it resumes), and the bench configuration of its steps."""

from __future__ import annotations

import argparse
from typing import Any

from vtui.tune import progress

DEFAULT_LOAD_CAP = 256  # the starting load is the instance's max concurrency, at most this
# what a resume does not take from the recorded tune
NOT_RESUMED = {
    "words",
    "json",
    "save",
    "detach",
    "resume",
    "restore",
    "dry_run",
    "func",
    "command",
    "attach",
    "cancel",
    "cancel_on_interrupt",
}


class TuneSetup:
    """Everything a tune needs, gathered from the supervisor's view of the instance (on `--resume`:
    the original flags, the settings and the resolved load from the recorded tune)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from vtui.commands._runs import base_url_of, connect
        from vtui.commands.restart import parse_sets
        from vtui.core import vllm_memory
        from vtui.planner import flag_default
        from vtui.tune import Objective, build_space, start_config
        from vtui.tune.runner import model_config, planner_predictor, running_flags

        try:
            fixed = parse_sets(args.fix)
        except ValueError as exc:
            raise ValueError(str(exc).replace("--set", "--fix", 1)) from None
        self.session = connect(args.words, command="tune")
        if len(self.session.names) != 1:
            raise ValueError("name exactly one instance")
        self.name = self.session.names[0]
        self.progress_file = progress.progress_path(self.session.name, self.name)
        self.previous = progress.read(self.progress_file)
        self.resume = self._resumed(args)
        status = self.session.status()
        inst = next(i for i in status["instances"] if i["name"] == self.name)
        if inst["state"] != "ready" and not (self.resume or args.restore):
            raise ValueError(f"{self.name} is {inst['state']}: start it first (`vtui up`), then tune it")
        self.layout_path = status.get("layout_path")
        spec = inst["spec"]
        self.engine, self.model = spec.get("engine"), spec.get("model")
        facts = inst.get("facts") or {}
        recorded = self.resume or (self.previous if args.restore else None)  # the tune to go on with / undo
        resolved = (recorded or {}).get("resolved") or {}
        self.original = (
            dict(recorded["original"]) if recorded else running_flags(self.session.client, self.name)
        )
        self.base_url = base_url_of(spec)
        gpu_gib = self._gpu_gib(spec, self.original)
        self.gpu_gib = gpu_gib
        self.sim_params = _str(self.original.get("sim-params"))
        device = "cuda"
        model_max = facts.get("max_model_len")
        self.defaults: dict[str, Any] = {
            "max-num-seqs": vllm_memory.default_max_num_seqs(gpu_gib, device),
            "max-num-batched-tokens": vllm_memory.default_max_num_batched_tokens(gpu_gib, device),
            "gpu-memory-utilization": flag_default("gpu-memory-utilization"),
            "enable-chunked-prefill": True,
            "enable-prefix-caching": True,
        }
        if model_max:
            self.defaults["max-model-len"] = int(model_max)
        running_len = self.original.get("max-model-len") or model_max
        context = (
            resolved.get("context")
            or args.context
            or (int(running_len) if isinstance(running_len, int) else None)
        )
        if context is None:
            raise ValueError("give --context N: the instance's context length is not known yet")
        max_conc = facts.get("max_concurrency")
        self.context = int(context)
        self.concurrency = (
            resolved.get("concurrency")
            or args.concurrency
            or (max(1, min(DEFAULT_LOAD_CAP, int(max_conc))) if max_conc else 32)
        )
        self.workload_tokens = args.input_len + args.output_len
        self.space = build_space(
            self.original,
            required_context=context,
            model_max_len=int(model_max) if model_max else None,
            concurrency=self.concurrency,
            allow_quality_trade=args.allow_quality_trade,
            fixed=fixed,  # type: ignore[arg-type]
            default_max_num_seqs=self.defaults["max-num-seqs"],
            default_max_num_batched_tokens=self.defaults["max-num-batched-tokens"],
        )
        self.start = start_config(self.original, self.space, self.defaults)
        self.objective = Objective(args.ttft_p95_ms, args.itl_p95_ms, args.objective)
        cfg = model_config(self.engine or "vllm", str(self.model), _str(self.original.get("sim-params")))
        base = planner_predictor(cfg, gpu_gib, self.workload_tokens)
        logged, planned = facts.get("kv_cache_tokens"), base(self.start).kv_cache_tokens
        calibration = resolved.get("calibration") or (logged / planned if logged and planned else 1.0)
        self.calibration = float(calibration)
        self.predictor = planner_predictor(cfg, gpu_gib, self.workload_tokens, calibration=calibration)
        self.gpus = len(spec.get("gpus") or []) or 1
        self.gpu_hour_price = None
        from vtui.layouts import LayoutError
        from vtui.telemetry.flagschema import load_resolved

        try:
            self.gpu_hour_price = (
                load_resolved(self.layout_path)[0].session.gpu_hour_price if self.layout_path else None
            )
        except LayoutError:  # the report goes without a price; the tune does not need the file
            self.gpu_hour_price = None

    def _resumed(self, args: argparse.Namespace) -> dict[str, Any] | None:
        """The recorded tune `--resume` continues (its settings replace the command line's but --json,
        --save and --detach), after the checks; None without --resume."""
        state = progress.live_state(self.previous)
        if state == progress.LIVE:
            raise ValueError(
                f"a tune of {self.name} is running in the session supervisor: `--attach` follows it, "
                "`--cancel` stops it"
            )
        if args.restore:
            if state != "interrupted":
                raise ValueError(f"no interrupted tune of {self.name} to restore (last: {state or 'none'})")
            return None
        if not args.resume:
            if state == "interrupted" and not args.dry_run:
                raise ValueError(
                    f"the last tune of {self.name} was interrupted (its process died) and may have left "
                    f"trial flags running: `--resume` it, or `--restore` its original flags first"
                )
            return None
        if self.previous is None or state == "done":
            raise ValueError(f"no unfinished tune of {self.name} to resume (last: {state or 'none'})")
        for key, value in (self.previous.get("options") or {}).items():
            if key not in NOT_RESUMED and hasattr(args, key):
                setattr(args, key, value)
        return self.previous

    def _gpu_gib(self, spec: dict[str, Any], flags: dict[str, object]) -> float | None:
        sim = flags.get("sim-gpu-memory-gib")
        if isinstance(sim, (int, float)) and not isinstance(sim, bool):
            return float(sim)
        from vtui.layouts import LayoutError
        from vtui.telemetry.flagschema import load_resolved

        try:
            session_gib = (
                load_resolved(self.layout_path)[0].session.gpu_memory_gib if self.layout_path else None
            )
        except LayoutError:  # no usable layout file: the sim's flag or NVML says
            session_gib = None
        if session_gib:
            return float(session_gib)
        return 80.0 if spec.get("engine") == "sim" else _nvml_gib()


def _nvml_gib() -> float | None:
    from vtui.commands.plan import _nvml_gib as nvml

    return nvml()


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def bench_config(setup: TuneSetup, args: argparse.Namespace):
    from vtui.bench import BenchConfig

    load = setup.concurrency
    return BenchConfig(
        base_url=setup.base_url,
        mode="rate" if args.request_rate else "concurrency",
        concurrency=0 if args.request_rate else load,
        request_rate=args.request_rate,
        num_requests=args.num_requests or max(32, 4 * load),
        input_len=args.input_len,
        output_len=args.output_len,
        scrape_interval_s=0.2,
        api_key=_api_key(setup),
    )


def _api_key(setup: TuneSetup) -> str | None:
    """The instance's api-key from its layout (the supervisor shows it masked), else VLLM_API_KEY."""
    import os

    from vtui.layouts import LayoutError
    from vtui.telemetry.flagschema import load_resolved

    try:
        key = (
            load_resolved(setup.layout_path)[0].instance(setup.name).flags.get("api-key")
            if setup.layout_path
            else None
        )
    except (LayoutError, KeyError):  # no usable layout file, or not in it: the environment's key, if any
        key = None
    key = key[0] if isinstance(key, list) and key else key
    return str(key) if isinstance(key, str) and key else os.environ.get("VLLM_API_KEY")
