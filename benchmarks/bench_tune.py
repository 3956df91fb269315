"""The tuner against the ground truth: an exhaustive grid over the same space on the sim.

One sim instance (Qwen3-0.6B on a small simulated GPU, so the KV cache runs short inside the space and
preemptions start) under its session supervisor, in a private state dir. The space is the tuner's own
(vtui.tune.build_space) with gpu-memory-utilization, max-model-len and prefix caching fixed and the
max-num-batched-tokens ladder cut to 512 … 16k, so the grid finishes in minutes on a small machine: max-num-seqs × max-num-batched-tokens × chunked prefill, less the
combinations vLLM refuses (chunked prefill off with max-num-batched-tokens < max-model-len). Every trial
of both is the same restart → warm-up → bench step (vtui.tune.runner.SupervisorRunner).

Two more searches on the same space: a plain sweep in the style of `vllm bench sweep` (every
combination launched, in order, no pruning: not even of the combinations vLLM refuses at startup), and,
when optuna is installed, Optuna's TPE sampler with the SLO as a constraint (`constraints_func`) given
the tuner's launched-trial budget (a suggestion the plan rules out, or one already measured, costs no
launch; `--optuna-seeds` runs).

Then the winners (the grid's best under the SLO, the tuner's, Optuna's) are measured again `--confirm`
times each, alternating, so the comparison is not decided by one lucky run (a grid's maximum over many
noisy runs is biased upwards). Target: the tuner's confirmed goodput ≥ 95 % of the grid's with ≤ one
third of the grid's launched trials. Also printed: the response curves of the sim along max-num-seqs
and max-num-batched-tokens (throughput, TTFT p95, KV peak, preemptions), read off the grid.

    python benchmarks/bench_tune.py [--ttft-p95-ms 400] [--concurrency 24] [--no-sweep] [--optuna-seeds 2]
                                    [--json] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import _smoke

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TOKENS = (512, 1024, 2048, 4096, 8192, 16384)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _vtui(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "vtui", *args], check=True, capture_output=True, text=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ttft-p95-ms", type=float, default=400.0)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--input-len", type=int, default=384)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--num-requests", type=int, default=40)
    parser.add_argument("--gpu-gib", type=float, default=2.5, help="memory of the simulated GPU")
    parser.add_argument("--confirm", type=int, default=3, help="re-measurements of each winner")
    parser.add_argument("--no-sweep", action="store_true", help="skip the plain sweep-style grid")
    parser.add_argument("--optuna-seeds", type=int, default=1, help="Optuna runs (0: none)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    _smoke.tiny(
        parser,
        concurrency=2,
        input_len=32,
        output_len=4,
        num_requests=4,
        confirm=1,
        no_sweep=True,
        optuna_seeds=0,
    )
    args = parser.parse_args()

    state = tempfile.mkdtemp(prefix="vtui-bench-tune-")
    os.environ.update({"VTUI_STATE_DIR": state, "VTUI_SUPERVISOR_GPU": "0", "VTUI_SUPERVISOR_IDLE_S": "60"})
    os.environ["PYTHONPATH"] = str(ROOT)
    layout = Path(state) / "layout.toml"
    start_flags = {
        "max-model-len": 2048,
        "max-num-seqs": 4,
        "gpu-memory-utilization": 0.9,
        "sim-gpu-memory-gib": args.gpu_gib,
        "sim-startup-scale": 0.0,
    }
    body = "".join(f"{k} = {v}\n" for k, v in start_flags.items())
    layout.write_text(
        '[session]\nname = "benchtune"\n\n[[instance]]\nname = "a"\nengine = "sim"\n'
        f'model = "Qwen/Qwen3-0.6B"\nport = {_free_port()}\nrestart = "never"\ngpus = [0]\n\n'
        f"[instance.flags]\n{body}"
    )
    _vtui("up", str(layout))
    try:
        return _run(args, layout, start_flags)
    finally:
        _vtui("down", str(layout))


def _run(args: argparse.Namespace, layout: Path, start_flags: dict) -> int:
    from vtui.bench import BenchConfig
    from vtui.commands._runs import base_url_of, connect
    from vtui.tune import Objective, Search, StartFailed, build_space, meets_slo, start_config
    from vtui.tune.runner import SupervisorRunner, model_config, planner_predictor, running_flags
    from vtui.tune.search import merge

    session = connect([str(layout), "a"], command="bench")
    inst = next(i for i in session.status()["instances"] if i["name"] == "a")
    flags = running_flags(session.client, "a")
    defaults = {"max-num-batched-tokens": 8192, "enable-chunked-prefill": True, "enable-prefix-caching": True}
    fixed = {"gpu-memory-utilization": 0.9, "max-model-len": 2048, "enable-prefix-caching": True}
    space = build_space(
        flags, required_context=2048, model_max_len=40960, concurrency=args.concurrency, fixed=fixed
    )
    # cut to a grid that finishes in minutes here: max-num-batched-tokens 512 … 16k
    space = replace(space, values={**space.values, "max-num-batched-tokens": TOKENS})
    if _smoke.on():  # a grid of two: the first two max-num-seqs, vLLM's default for the rest
        values = {d: (defaults[d],) if d in defaults else v for d, v in space.values.items()}
        space = replace(space, values={**values, "max-num-seqs": tuple(space.values["max-num-seqs"][:2])})
    start = start_config(flags, space, defaults)
    bench = BenchConfig(
        base_url_of(inst["spec"]),
        concurrency=args.concurrency,
        num_requests=args.num_requests,
        input_len=args.input_len,
        output_len=args.output_len,
        scrape_interval_s=0.2,
    )
    objective = Objective(ttft_p95_ms=args.ttft_p95_ms)
    runner = SupervisorRunner(session.client, "a", bench, defaults=defaults, warmup_requests=2)
    search = Search(space, start, runner, objective)  # for its rules only (vLLM's refusals)

    # -- the grid ---------------------------------------------------------------------------------
    dims = space.dims()
    grid = []
    t0 = time.monotonic()
    for values in itertools.product(*(space.values[d] for d in dims)):
        config = start.with_(**dict(zip(dims, values, strict=True)))
        if search.plan_problem(config, search.predictor(config)) is not None:
            continue  # vLLM refuses it at startup: no grid would run it either
        try:
            m = runner.measure(config)
        except StartFailed as exc:  # a launched trial all the same (vLLM's KV check at startup)
            grid.append((config, None))
            print(
                f"grid {len(grid)}: {config.changed(start)} -> failed to start: {exc.message[:80]}",
                file=sys.stderr,
            )
            continue
        grid.append((config, m))
        print(
            f"grid {len(grid)}: {config.changed(start)} -> {m.req_per_s:.2f} req/s, "
            f"TTFT p95 {m.ttft_p95_ms:.0f} ms, KV {m.kv_peak}, preempt {m.preemptions}",
            file=sys.stderr,
        )
    grid_wall = time.monotonic() - t0
    feasible = [(c, m) for c, m in grid if m is not None and meets_slo(m, objective)]
    grid_best = max(feasible, key=lambda cm: cm[1].req_per_s) if feasible else None

    # -- the tuner ----------------------------------------------------------------------------------
    runner.apply(flags, exact=True)
    cfg = model_config("sim", "Qwen/Qwen3-0.6B")
    predictor = planner_predictor(cfg, args.gpu_gib, args.input_len + args.output_len)
    budget = len(grid) // 3 - 2  # its re-measurement of the top 2 counts too
    if _smoke.on():
        budget = max(budget, 1)  # the start's trial at least
    tuner_runner = SupervisorRunner(session.client, "a", bench, defaults=defaults, warmup_requests=2)
    tuner = Search(
        space,
        start,
        tuner_runner,
        objective,
        predictor,
        max_trials=budget,
        workload_tokens=args.input_len + args.output_len,
    )
    t0 = time.monotonic()
    result = tuner.run()
    tune_wall = time.monotonic() - t0
    tune_launched = sum(1 + len(t.repeats) for t in result.trials if t.launched)

    # -- the plain sweep: every combination launched, no pruning -----------------------------------
    sweep = None
    if not args.no_sweep:
        sweep = _sweep(space, start, dims, session, bench, defaults, objective)
        print(f"sweep: {sweep['launched']} launched in {sweep['wall_s']} s", file=sys.stderr)

    # -- Optuna TPE, constrained, on the tuner's budget ---------------------------------------------
    optuna_runs = []
    for seed in range(args.optuna_seeds):
        run = _optuna(
            space, start, dims, session, bench, defaults, objective, search, predictor, tune_launched, seed
        )
        if run is None:
            break
        optuna_runs.append(run)
        print(
            f"optuna seed {seed}: {run['launched']} launched in {run['wall_s']} s, best {run['best']}",
            file=sys.stderr,
        )

    # -- confirm the winners, alternating ----------------------------------------------------------
    finalists = {"grid": grid_best[0] if grid_best else None, "tuner": result.best.config}
    for run in optuna_runs:
        finalists[f"optuna{run['seed']}"] = run.pop("_config")
    confirm: dict[str, list] = {name: [] for name in finalists}
    if grid_best is not None:
        for _ in range(args.confirm):
            for name, config in finalists.items():
                if config is not None:
                    confirm[name].append(runner.measure(config))
    confirmed = {name: merge(ms) if ms else None for name, ms in confirm.items()}
    grid_conf, tune_conf = confirmed["grid"], confirmed["tuner"]
    for run in optuna_runs:
        conf = confirmed[f"optuna{run['seed']}"]
        run["best_confirmed"] = conf.to_json() if conf else None
        run["ratio_confirmed"] = (
            round(conf.req_per_s / grid_conf.req_per_s, 4) if conf and grid_conf else None
        )
        run["meets_slo_confirmed"] = meets_slo(conf, objective) if conf else None

    curves = _curves(grid, start)
    doc = {
        "space": {d: list(space.values[d]) for d in dims},
        "space_size": space.size(),
        "grid_launched": len(grid),
        "grid_wall_s": round(grid_wall, 1),
        "grid_best": _row(grid_best, start),
        "grid_best_confirmed": grid_conf.to_json() if grid_conf else None,
        "tuner_launched": tune_launched,
        "tuner_pruned_from_plan": sum(1 for t in result.trials if not t.launched),
        "tuner_restarts": result.restarts,
        "tuner_wall_s": round(tune_wall, 1),
        "tuner_best": {"changed": result.best.config.changed(start), **(result.best.result.to_json())},
        "tuner_best_confirmed": tune_conf.to_json() if tune_conf else None,
        "ratio_confirmed": round(tune_conf.req_per_s / grid_conf.req_per_s, 4)
        if grid_conf and tune_conf
        else None,
        "ratio_first_run": round(result.best.result.req_per_s / grid_best[1].req_per_s, 4)
        if grid_best
        else None,
        "trials_fraction": round(tune_launched / len(grid), 4),
        "tuner_meets_slo_confirmed": meets_slo(tune_conf, objective) if tune_conf else None,
        "sweep": sweep,
        "optuna": optuna_runs,
        "curves": curves,
        "settings": {**vars(args), "out": str(args.out) if args.out else None, "start": start_flags},
    }
    ok = bool(doc["ratio_confirmed"] and doc["ratio_confirmed"] >= 0.95 and doc["trials_fraction"] <= 1 / 3)
    doc["target_met"] = ok
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        _print(doc)
    if _smoke.on():
        print("smoke: the target is not judged on a grid of two")
        return 0
    return 0 if ok else 1


def _sweep(space, start, dims, session, bench, defaults, objective) -> dict:
    """`vllm bench sweep`'s way: one server per combination of the serve parameters, in order, all of
    them; what vLLM refuses at startup is found out by launching it."""
    from vtui.tune import StartFailed, meets_slo
    from vtui.tune.runner import SupervisorRunner

    runner = SupervisorRunner(session.client, "a", bench, defaults=defaults, warmup_requests=2)
    best, launched, failed = None, 0, 0
    t0 = time.monotonic()
    for values in itertools.product(*(space.values[d] for d in dims)):
        config = start.with_(**dict(zip(dims, values, strict=True)))
        launched += 1
        try:
            m = runner.measure(config)
        except StartFailed:
            failed += 1
            continue
        if meets_slo(m, objective) and (best is None or m.req_per_s > best[1].req_per_s):
            best = (config, m)
    return {
        "launched": launched,
        "failed_to_start": failed,
        "restarts": runner.restarts,
        "wall_s": round(time.monotonic() - t0, 1),
        "best": _row(best, start),
    }


def _optuna(space, start, dims, session, bench, defaults, objective, search, predictor, budget, seed):
    """Optuna's TPE with the SLO as a constraint, on `budget` launched trials. A suggestion that vLLM
    refuses or the planner rules out is told back as infeasible without a launch; one already measured
    is answered from the cache (Optuna's categorical TPE repeats itself on small spaces)."""
    try:
        import optuna
    except ImportError:
        print("optuna is not installed: no Optuna comparison", file=sys.stderr)
        return None
    from vtui.tune import StartFailed, meets_slo, score
    from vtui.tune.runner import SupervisorRunner

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    runner = SupervisorRunner(session.client, "a", bench, defaults=defaults, warmup_requests=2)
    runner.apply(start.flags)

    def constraints(trial) -> tuple[float]:
        return (trial.user_attrs["excess"],)

    sampler = optuna.samplers.TPESampler(seed=seed, constraints_func=constraints, n_startup_trials=5)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    cache: dict = {}
    launched, asked = 0, 0
    t0 = time.monotonic()
    while launched < budget and asked < 400:
        asked += 1
        trial = study.ask()
        config = start.with_(**{d: trial.suggest_categorical(d, list(space.values[d])) for d in dims})
        if config not in cache:
            problem = search.plan_problem(config, predictor(config)) if config != start else None
            if problem is not None:
                cache[config] = None
            else:
                launched += 1
                try:
                    cache[config] = runner.measure(config)
                except StartFailed:
                    cache[config] = None
        m = cache[config]
        value = score(m, objective)
        excess = 0.0 if meets_slo(m, objective) else 1.0 + max(0.0, -value if value > -1e5 else 1.0)
        trial.set_user_attr("excess", excess)
        study.tell(trial, value if m is not None and value > -1e5 else -1.0)
    measured = [(c, m) for c, m in cache.items() if m is not None and meets_slo(m, objective)]
    best = max(measured, key=lambda cm: cm[1].req_per_s) if measured else None
    return {
        "seed": seed,
        "launched": launched,
        "asked": asked,
        "wall_s": round(time.monotonic() - t0, 1),
        "best": _row(best, start),
        "_config": best[0] if best else None,
    }


def _row(cm, start) -> dict | None:
    if cm is None:
        return None
    config, m = cm
    return {"changed": config.changed(start), **m.to_json()}


def _curves(grid, start) -> dict:
    """Throughput/TTFT/KV/preemptions along max-num-seqs (chunked prefill on, the start's
    max-num-batched-tokens) and along max-num-batched-tokens (chunked on, max-num-seqs 16)."""
    tokens0 = 8192
    by_seqs = [
        {"max-num-seqs": c.get("max-num-seqs"), **m.to_json()}
        for c, m in grid
        if m is not None
        and c.get("enable-chunked-prefill") is True
        and c.get("max-num-batched-tokens") == tokens0
    ]
    by_tokens = [
        {"max-num-batched-tokens": c.get("max-num-batched-tokens"), **m.to_json()}
        for c, m in grid
        if m is not None and c.get("enable-chunked-prefill") is True and c.get("max-num-seqs") == 16
    ]
    return {"by_max_num_seqs": by_seqs, "by_max_num_batched_tokens": by_tokens}


def _print(doc: dict) -> None:
    print(f"space {doc['space']} ({doc['space_size']} combinations)")
    print(f"grid: {doc['grid_launched']} launched trials in {doc['grid_wall_s']} s; best {doc['grid_best']}")
    print(
        f"tuner: {doc['tuner_launched']} launched ({doc['trials_fraction']:.0%} of the grid), "
        f"{doc['tuner_pruned_from_plan']} scored from the plan, {doc['tuner_wall_s']} s; best {doc['tuner_best']}"
    )
    print(
        f"confirmed: grid best {doc['grid_best_confirmed']}\n           tuner best {doc['tuner_best_confirmed']}"
    )
    print(
        f"tuner / grid goodput (confirmed): {doc['ratio_confirmed']}; first run {doc['ratio_first_run']}; "
        f"target met: {doc['target_met']}"
    )
    if doc.get("sweep"):
        sw = doc["sweep"]
        print(
            f"plain sweep (vllm bench sweep style): {sw['launched']} launched ({sw['failed_to_start']} failed to "
            f"start), {sw['wall_s']} s; best {sw['best']}"
        )
    for run in doc.get("optuna") or []:
        print(
            f"optuna TPE seed {run['seed']}: {run['launched']} launched ({run['asked']} asked), {run['wall_s']} s; "
            f"confirmed {run['best_confirmed']}, ratio {run['ratio_confirmed']}"
        )
    for name, rows in doc["curves"].items():
        print(name)
        for r in rows:
            key = next(iter(r))
            print(
                f"  {key}={r[key]:<6} {r['req_per_s']:>7.2f} req/s  TTFT p95 {r['ttft_p95_ms']:>7.0f} ms  "
                f"ITL p95 {r['itl_p95_ms']:>6.1f} ms  KV {r['kv_peak']}  preempt {r['preemptions']}"
            )


if __name__ == "__main__":
    raise SystemExit(main())
