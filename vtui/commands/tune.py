"""`vtui tune [LAYOUT] NAME`: find the flags that give the most goodput under the SLOs for this box and
this workload, unattended: a structured search in the seeds' order (vtui.tune), each trial a restart
through the instance's operation queue, a warm-up and 2-3 bench runs (the noise rule). The tune runs in
the session supervisor (`vtui.tune.job`): this command plans it, starts it (`POST /tune`) and follows
it on the feed; Ctrl-C only stops following (`--attach` follows again, `--cancel` stops it and puts
the original flags back; `--cancel-on-interrupt` makes Ctrl-C cancel). At the end the best flags run
if they beat the baseline beyond noise (`--save`: the supervisor writes them into the layout, comments
kept, whether or not a command still follows), else the original flags stay; a report (JSON + table)
goes to the state dir."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from vtui.commands._input import Value, bounded
from vtui.commands._tune_control import options_of, restore_only
from vtui.commands._tune_output import dry_run, fmt, print_dry
from vtui.commands._tune_setup import TuneSetup, bench_config
from vtui.tune import progress
from vtui.tune.report import render_table

HELP = "find the best flags for a workload under TTFT/ITL SLOs (restarts the instance per trial)"
trial_json = progress.trial_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("words", nargs="+", metavar="[LAYOUT] NAME", help="layout file, then the instance")
    parser.add_argument("--ttft-p95-ms", type=bounded(0, above=True), action=Value, default=None)
    parser.add_argument("--itl-p95-ms", type=bounded(0, above=True), action=Value, default=None)
    parser.add_argument("--input-len", type=bounded(1, 10**7, integer=True), action=Value, default=256)
    parser.add_argument("--output-len", type=bounded(1, 10**7, integer=True), action=Value, default=64)
    load = parser.add_mutually_exclusive_group()
    load.add_argument(
        "--concurrency",
        type=bounded(1, 100_000, integer=True),
        action=Value,
        default=None,
        help="requests in flight (default: the instance's max concurrency from its startup log)",
    )
    load.add_argument("--request-rate", type=bounded(0, above=True), action=Value, default=None)
    parser.add_argument(
        "--context",
        type=bounded(1, 10**8, integer=True),
        action=Value,
        default=None,
        help="required context length: max-model-len never below it (default: the instance's)",
    )
    parser.add_argument(
        "--num-requests",
        type=bounded(1, 10**6, integer=True),
        action=Value,
        default=None,
        help="requests per bench step (default: 4 × the load, at least 32)",
    )
    parser.add_argument("--warmup", type=bounded(0, 10**6, integer=True), action=Value, default=4)
    parser.add_argument(
        "--objective", choices=("rps", "tok"), default="rps", help="goodput in requests/s or output tok/s"
    )
    parser.add_argument("--max-trials", type=bounded(1, 10_000, integer=True), action=Value, default=24)
    parser.add_argument(
        "--fix", action="append", default=[], metavar="FLAG=VALUE", help="keep a flag at this value"
    )
    parser.add_argument(
        "--allow-quality-trade", action="store_true", help="also try a smaller KV cache dtype (fp8)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan; restart nothing")
    parser.add_argument(
        "--detach",
        action="store_true",
        help="start the tune (it runs in the session supervisor) and return without following it",
    )
    parser.add_argument(
        "--attach", action="store_true", help="follow the instance's running (or last) tune again"
    )
    parser.add_argument(
        "--cancel",
        action="store_true",
        help="stop the instance's running tune: it puts the original flags back (then follows that)",
    )
    parser.add_argument(
        "--cancel-on-interrupt",
        action="store_true",
        help="Ctrl-C cancels the tune (default: Ctrl-C only stops following; the tune runs on)",
    )
    parser.add_argument(
        "--min-runs",
        type=bounded(1, 20, integer=True),
        action=Value,
        default=None,
        help="bench runs of each configuration (default 3; 2 when the difference is clear by then)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the instance's last tune (stopped, killed or aborted) from its recorded trials, "
        "with its settings",
    )
    parser.add_argument(
        "--restore",
        action="store_true",
        help="put back the original flags of an interrupted tune (its process was killed) and stop there",
    )
    parser.add_argument("--save", action="store_true", help="write the best flags into the layout file")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from vtui.commands._runs import CommandError, ServiceError, ServiceUnavailable, print_json

    if args.attach or args.cancel:
        return control(args)
    try:
        setup = TuneSetup(args)
    except CommandError as exc:
        return exc.code
    except (ValueError, KeyError) as exc:
        print(f"vtui tune: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        doc = dry_run(setup)
        print_json(doc) if args.json else print_dry(doc)
        return 0
    if args.restore:
        return restore_only(setup, args)
    client = setup.session.client
    try:
        answer = client.post("/tune", {"name": setup.name, "plan": plan_of(setup, args)})
    except ServiceError as exc:
        print(f"vtui tune: {exc}", file=sys.stderr)
        return 2 if exc.status in (400, 409) else 1
    except ServiceUnavailable as exc:
        print(f"vtui tune: {exc}", file=sys.stderr)
        return 1
    if args.detach:
        info = {"instance": setup.name, "session": setup.session.name, "progress": str(setup.progress_file)}
        if args.json:
            print_json(info)
        else:
            print(f"tune of {setup.name} running in session {setup.session.name}'s supervisor")
            print(f"follow: vtui tune {' '.join(args.words)} --attach   stop: … --cancel")
        return 0
    return follow(client, setup.name, args, answer.get("tune"), layout=setup.layout_path)


def control(args: argparse.Namespace) -> int:
    """--attach (follow the tune the supervisor runs) and --cancel (stop it: it restores, then ends)."""
    from vtui.commands._runs import CommandError, ServiceError, ServiceUnavailable, connect

    try:
        session = connect(args.words, command="tune")
    except CommandError as exc:
        return exc.code
    if len(session.names) != 1:
        print("vtui tune: name exactly one instance", file=sys.stderr)
        return 2
    name = session.names[0]
    try:
        if args.cancel:
            doc = session.client.post("/tune/cancel", {"name": name})["tune"]
            print(f"{name}: tune cancelled; it puts the original flags back", file=sys.stderr)
            if args.detach:
                return 0
        else:
            answer = session.client.get(f"/tune?name={name}")
            doc = answer.get("tune")
            if doc is None:
                print(f"vtui tune: no tune of {name} recorded", file=sys.stderr)
                return 2
    except ServiceError as exc:
        print(f"vtui tune: {exc}", file=sys.stderr)
        return 2 if exc.status in (400, 404, 409) else 1
    except ServiceUnavailable as exc:
        print(f"vtui tune: {exc}", file=sys.stderr)
        return 1
    layout = (session.status() or {}).get("layout_path") if args.save else None
    return follow(session.client, name, args, doc, layout=layout)


def follow(
    client, name: str, args: argparse.Namespace, doc: dict[str, Any] | None, layout: str | None
) -> int:
    """Print the tune's trials as the supervisor's feed brings them, then its end (table or JSON; with
    --save the applied flags go into the layout). Ctrl-C leaves the tune running (it is the
    supervisor's); with --cancel-on-interrupt it cancels it and follows its restore."""
    from vtui.commands._runs import ServiceError, ServiceUnavailable

    shown = 0
    cancelled = False

    def show(doc: dict[str, Any]) -> bool:
        nonlocal shown
        trials = doc.get("trials") or []
        if not args.json:
            for t in trials[shown:]:
                print(trial_line(t), file=sys.stderr, flush=True)
        shown = max(shown, len(trials))
        return doc.get("state") != progress.LIVE

    while True:
        try:
            if doc is not None and show(doc):
                return ended(doc, name, args, layout)
            for message in client.feed():
                if message.get("type") == "hello":  # the feed is up: what happened before it, then on
                    doc = client.get(f"/tune?name={name}").get("tune") or doc
                elif message.get("type") == "tune" and message.get("instance") == name:
                    doc = message["tune"]
                else:
                    continue
                if doc is not None and show(doc):
                    return ended(doc, name, args, layout)
            print(f"vtui tune: the supervisor went away; its tune of {name} did not end", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            if args.cancel_on_interrupt and not cancelled:
                cancelled = True
                print(f"\n{name}: cancelling the tune; it puts the original flags back", file=sys.stderr)
                try:
                    client.post("/tune/cancel", {"name": name})
                except ServiceError:
                    pass  # it ended meanwhile
                continue
            print(
                f"\nthe tune of {name} runs on in the session supervisor: `vtui tune {' '.join(args.words)} "
                "--attach` follows it again, `--cancel` stops it"
                + ("; it saves the best flags into the layout if it applies them" if args.save else ""),
                file=sys.stderr,
            )
            return 130
        except (ServiceUnavailable, OSError) as exc:
            print(f"vtui tune: {exc}", file=sys.stderr)
            return 1


def trial_line(t: dict[str, Any]) -> str:
    m = t.get("measurement")
    sp = t.get("spread") or {}
    if m:
        what = f"{m['req_per_s']:.2f} req/s"
        if sp.get("n", 0) > 1:
            what += f" ± {sp['stdev']:.2f} (n={sp['n']})"
        what += f", TTFT p95 {fmt(m.get('ttft_p95_ms'), '.0f')} ms"
    else:
        what = t.get("infeasible") or "--"
    change = ", ".join(f"{k}={v}" for k, v in (t.get("changed") or {}).items()) or "start"
    return f"trial {t['index']} [{t['stage']}] {change}: {what}"


def ended(doc: dict[str, Any], name: str, args: argparse.Namespace, layout: str | None) -> int:
    from vtui.commands._runs import print_json

    state = doc.get("state")
    result = doc.get("result")
    if state == "done" and result is not None:
        print_json(result) if args.json else print(doc.get("table") or render_table(result))
        if result.get("report"):
            print(f"report: {result['report']} (+ .txt)", file=sys.stderr)
        if "saved_to" in result:  # started with --save: the supervisor saved when it applied the best
            for problem in result.get("save_problems") or []:
                print(f"vtui tune: {problem}", file=sys.stderr)
            if result["saved_to"]:
                print(f"{name}: flags saved to {result['saved_to']}", file=sys.stderr)
            elif not result.get("applied"):
                print(f"{name}: nothing saved (the best was not applied)", file=sys.stderr)
            return 1 if result.get("save_problems") else 0
        if args.save and result.get("applied"):  # `--attach --save` of a tune started without it
            from pathlib import Path

            from vtui.commands.restart import save_flags

            code, saved = save_flags(Path(layout) if layout else None, name, result["final_flags"])
            if saved is not None:
                print(f"{name}: flags saved to {saved}", file=sys.stderr)
            return code
        if args.save:
            print(f"{name}: nothing saved (the best was not applied)", file=sys.stderr)
        return 0
    print(f"vtui tune: {name}: {state}: {doc.get('message')}", file=sys.stderr)
    if args.json:
        print_json({"instance": name, "state": state, "message": doc.get("message")})
    return 130 if state == "aborted" else 1


def plan_of(setup: TuneSetup, args: argparse.Namespace) -> dict[str, Any]:
    from vtui.tune.job import plan_json

    b = bench_config(setup, args)
    return plan_json(
        original=setup.original,
        start=setup.start,
        space=setup.space,
        defaults=setup.defaults,
        objective=setup.objective,
        bench={
            "mode": b.mode,
            "concurrency": b.concurrency,
            "request_rate": b.request_rate,
            "num_requests": b.num_requests,
            "input_len": b.input_len,
            "output_len": b.output_len,
        },
        warmup=args.warmup,
        max_trials=args.max_trials,
        min_runs=args.min_runs,
        workload_tokens=setup.workload_tokens,
        model={
            "engine": setup.engine,
            "model": setup.model,
            "sim_params": setup.sim_params,
            "gpu_gib": setup.gpu_gib,
            "calibration": setup.calibration,
        },
        options=options_of(args),
        resolved={
            "concurrency": setup.concurrency,
            "context": setup.context,
            "calibration": setup.calibration,
        },
        layout=setup.layout_path,
        save=bool(args.save),
        resume={k: v for k, v in setup.resume.items() if k != "plan"} if setup.resume else None,
    )
