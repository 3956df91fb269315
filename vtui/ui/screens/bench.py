"""The bench screen: load-test the selected READY instance (`vtui.bench.run_bench`) with live progress,
each step beside what the server said, and an ASCII plot of tok/s and TTFT p95 per step.

The run is a thread worker with its own event loop (the load generator never competes with the UI's
loop); progress comes back as messages. Results are written where `vtui bench` writes them
(runs_dir()/bench) and attached to the instance's flag history entry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable, Sequence
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Input, Label, Static

from vtui.bench import BenchConfig, BenchProgress, BenchResult, StepResult, write_results
from vtui.core.paths import runs_dir
from vtui.ui import fmt
from vtui.ui.keymap import BENCH_BINDINGS
from vtui.ui.messages import BenchRecorded
from vtui.ui.screens.base import StoreScreen
from vtui.ui.store import Store
from vtui.ui.widgets.footer import LeanFooter
from vtui.ui.widgets.notices import NoticeLine
from vtui.ui.widgets.ordered_input import OrderedInput, after_typing
from vtui.ui.widgets.titlebar import TitleBar

FIELDS = (
    ("mode", "fixed", "fixed | ramp (1, 2, 4, ... up to concurrency)"),
    ("concurrency", "8", "in flight (ramp: the ceiling; from the log)"),
    ("requests", "32", "per step, >= concurrency (4 per worker)"),
    ("input-len", "128", "prompt tokens"),
    ("output-len", "64", "output tokens (ignore_eos)"),
)


class BenchProgressed(Message):
    def __init__(self, progress: BenchProgress) -> None:
        super().__init__()
        self.progress = progress

    def can_replace(self, message: Message) -> bool:  # a newer "running" snapshot supersedes an older one
        return (
            isinstance(message, BenchProgressed)
            and message.progress.phase == "running"
            and self.progress.phase == "running"
        )


class BenchDone(Message):
    def __init__(
        self, result: BenchResult | None, paths: tuple[Path, Path] | None, error: str | None
    ) -> None:
        super().__init__()
        self.result, self.paths, self.error = result, paths, error


DEFAULT_CONCURRENCY = 8


def starting_concurrency(max_concurrency: float | None, max_num_seqs: object) -> int:
    """Where a load test starts (the seeds: the startup log's "Maximum concurrency" is the stress
    test's starting point), never above max-num-seqs; 8 while the log has not said."""
    level = int(max_concurrency) if max_concurrency and max_concurrency >= 1 else DEFAULT_CONCURRENCY
    if isinstance(max_num_seqs, int) and not isinstance(max_num_seqs, bool) and max_num_seqs > 0:
        level = min(level, max_num_seqs)
    return max(1, level)


REQUESTS_PER_WORKER = 4


def requests_for(concurrency: int) -> int:
    """Requests per step for `concurrency` in flight: enough for every worker to send several (a step
    of fewer requests than workers never has `concurrency` in flight)."""
    return max(32, REQUESTS_PER_WORKER * concurrency)


def config_from(values: dict[str, str], base_url: str, api_key: str | None = None) -> BenchConfig:
    """A BenchConfig from the form (raises ValueError with a readable message)."""
    mode = values.get("mode", "fixed").strip().lower()
    if mode not in ("fixed", "ramp"):
        raise ValueError(f"mode: expected fixed or ramp, got {mode!r}")
    numbers: dict[str, int] = {}
    for key in ("concurrency", "requests", "input-len", "output-len"):
        try:
            numbers[key] = int(values.get(key, "").strip())
        except ValueError:
            raise ValueError(f"{key}: expected a whole number, got {values.get(key)!r}") from None
        if numbers[key] < 1:
            raise ValueError(f"{key}: must be at least 1")
    if numbers["requests"] < numbers["concurrency"]:
        raise ValueError(
            f"requests: {numbers['requests']} per step cannot keep concurrency {numbers['concurrency']}"
            f" in flight; use at least {numbers['concurrency']} (e.g. {requests_for(numbers['concurrency'])})"
        )
    return BenchConfig(
        base_url=base_url,
        mode="ramp" if mode == "ramp" else "concurrency",
        concurrency=numbers["concurrency"],
        num_requests=numbers["requests"],
        input_len=numbers["input-len"],
        output_len=numbers["output-len"],
        api_key=api_key,
    )


def step_line(s: StepResult) -> str:
    kv = fmt.pct(s.server.kv_usage_peak)
    waiting = fmt.num(s.server.waiting_peak)
    pre = fmt.num(s.server.preemptions)
    return (
        f"  {s.label:<7}{s.completed:>5}/{s.failed:<3}{s.req_per_s:>7.2f}{s.output_tok_per_s:>10.0f}"
        f"{fmt.seconds(s.ttft.p50):>8}{fmt.seconds(s.ttft.p95):>8}   {kv:>5}{waiting:>8}{pre:>8}"
    )


STEP_HEAD = (
    f"  {'step':<7}{'ok/err':>9}{'req/s':>7}{'out tok/s':>10}{'TTFT50':>8}{'TTFT95':>8}"
    f"   {'KV pk':>5}{'wait pk':>8}{'preempt':>8}"
)


def plot_text(steps: Sequence[StepResult], width: int = 40) -> Text:
    """Two ASCII bars per step: output tok/s (#) and TTFT p95 (=), each scaled to its largest step."""
    out = Text("Plot: out tok/s (#) and TTFT p95 (=) per step\n", style="bold")
    if not steps:
        out.append("  (no step finished yet)\n", style="dim")
        return out
    width = max(10, width)
    top_tps = max((s.output_tok_per_s for s in steps), default=0) or 1.0
    top_ttft = max((s.ttft.p95 or 0 for s in steps), default=0) or 1.0
    for s in steps:
        tps_n = round(s.output_tok_per_s / top_tps * width)
        ttft_n = round((s.ttft.p95 or 0) / top_ttft * width)
        out.append(f"  {s.label:<7}|")
        out.append("#" * tps_n, style="green")
        out.append(f"{'':<{width - tps_n}}| {fmt.rate(s.output_tok_per_s)} tok/s\n")
        out.append(f"  {'':<7}|")
        out.append("=" * ttft_n, style="yellow")
        out.append(f"{'':<{width - ttft_n}}| {fmt.seconds(s.ttft.p95)}\n")
    return out


def bench_summary(result: BenchResult, json_path: str | None = None) -> dict[str, object]:
    """What the flag history keeps of a run: per step req/s, out tok/s, TTFT p95, errors; the best step."""
    steps = [
        {
            "step": s.label,
            "req_s": round(s.req_per_s, 3),
            "out_tps": round(s.output_tok_per_s, 1),
            "ttft_p95": s.ttft.p95,
            "errors": s.failed,
        }
        for s in result.steps
    ]
    best = max(result.steps, key=lambda s: s.output_tok_per_s, default=None)
    return {
        "at": result.started_at,
        "mode": result.config.mode,
        "input_len": result.config.input_len,
        "output_len": result.config.output_len,
        "steps": steps,
        "best_out_tps": round(best.output_tok_per_s, 1) if best else None,
        "best_step": best.label if best else None,
        "json": json_path,
    }


async def _awaited(result: Awaitable[BenchResult]) -> BenchResult:
    return await result


class BenchScreen(StoreScreen):
    BINDINGS = [*BENCH_BINDINGS]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.instance = name
        self.steps: list[StepResult] = []
        self.running = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._run_task: asyncio.Task | None = None

    def compose(self) -> ComposeResult:
        yield TitleBar(f"bench {self.instance}", help_hint=False)
        with Vertical(id="bench-form"):
            view = self.app.store.views.get(self.instance)
            seqs = view.spec.flags.get("max-num-seqs") if view and view.spec else None
            start = starting_concurrency(view.facts.max_concurrency if view and view.facts else None, seqs)
            for key, default, hint in FIELDS:
                if key == "concurrency":
                    default = str(start)
                elif key == "requests":
                    default = str(requests_for(start))
                with Horizontal(classes="flag-row"):
                    yield Label(key, classes="bench-label")
                    yield OrderedInput(default, name=key, id=f"bench-{key}", classes="flag-value bench-value")
                    yield Label(hint, classes="bench-hint")
        yield Static(id="bench-status")
        yield Static(STEP_HEAD, id="bench-steps")
        yield Static(id="bench-plot")
        yield NoticeLine()
        yield LeanFooter(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.query_one(TitleBar).refresh_from(self.app.store)
        self._status(Text("ctrl+r runs the load test against " + self._url(), style="dim"))
        self.query_one("#bench-steps", Static).update(STEP_HEAD)
        self.query_one("#bench-plot", Static).update(plot_text([]))
        self.query(Input).first().focus()

    def refresh_view(self, store: Store, names: Iterable[str] | None = None) -> None:
        self.query_one(TitleBar).refresh_from(store)

    def _url(self) -> str:
        spec = self.app.store.views[self.instance].spec or self.app.store.layout.instance(self.instance)
        return spec.base_url

    def _status(self, text: Text | str) -> None:
        self.query_one("#bench-status", Static).update(text)

    @on(Input.Submitted, ".bench-value")
    def _submitted(self) -> None:
        self.action_run()

    # -- actions -----------------------------------------------------------------------------------
    def action_run(self) -> None:
        after_typing(self, self._start_run)

    def _start_run(self) -> None:
        if self.running:
            self.notify("a run is in progress (ctrl+x cancels it)", severity="warning")
            return
        view = self.app.store.views[self.instance]
        if not view.state.name == "READY":
            self.notify(
                f"{self.instance} is {view.state.name}: bench needs a READY instance", severity="error"
            )
            return
        values = {box.name or "": box.value for box in self.query(".bench-value").results(Input)}
        spec = view.spec
        key = spec.flags.get("api-key") if spec else None
        if isinstance(key, list):
            key = key[0] if key else None
        try:
            config = config_from(values, self._url(), key if isinstance(key, str) else None)
        except ValueError as exc:
            self._status(Text(str(exc), style="red"))
            return
        self.steps = []
        self.running = True
        self.query_one("#bench-steps", Static).update(STEP_HEAD)
        self.query_one("#bench-plot", Static).update(plot_text([]))
        self._status(f"starting {config.mode} run: {', '.join(f'c={int(x)}' for x in config.step_levels())}")
        self._run(config, flags=dict(spec.flags) if spec else {})

    def action_cancel(self) -> None:
        if self.running and self._loop is not None and self._run_task is not None:
            self._loop.call_soon_threadsafe(self._run_task.cancel)

    def action_back(self) -> None:
        if self.running:
            self.action_cancel()
            self.notify("bench cancelled")
        self.app.pop_screen()

    # -- the run (a thread with its own event loop) -------------------------------------------------
    @work(exit_on_error=False, thread=True, group="bench")
    def _run(self, config: BenchConfig, flags: dict) -> None:
        runner = self.app.bench_runner
        loop = asyncio.new_event_loop()
        try:
            self._loop = loop
            self._run_task = loop.create_task(_awaited(runner(config, self._progressed)))
            result = loop.run_until_complete(self._run_task)
            stem = (
                time.strftime("bench-%Y%m%d-%H%M%S", time.localtime(result.started_at)) + f"-{self.instance}"
            )
            paths = write_results(result, runs_dir() / "bench", stem)
            self.app.post_message(BenchRecorded(self.instance, bench_summary(result, str(paths[0]))))
            self.post_message(BenchDone(result, paths, None))
        except asyncio.CancelledError:
            self.post_message(BenchDone(None, None, "cancelled"))
        except Exception as exc:  # noqa: BLE001 — server down, bad answer: shown, never raised into the app
            self.post_message(BenchDone(None, None, f"{type(exc).__name__}: {exc}"))
        finally:
            self._loop = self._run_task = None
            loop.close()

    def _progressed(self, progress: BenchProgress) -> None:  # from the run's thread
        self.post_message(BenchProgressed(progress))

    def on_bench_progressed(self, message: BenchProgressed) -> None:
        p = message.progress
        if p.step is not None and p.phase == "step-done":
            self.steps.append(p.step)
            self.query_one("#bench-steps", Static).update(
                "\n".join([STEP_HEAD, *(step_line(s) for s in self.steps)])
            )
            self.query_one("#bench-plot", Static).update(plot_text(self.steps, self.size.width - 40))
        rate = p.completed / p.elapsed_s if p.elapsed_s > 0 else None
        self._status(
            f"step {p.step_index + 1}/{p.steps_total} c={p.level:g}  sent {p.sent}  done {p.completed}  "
            f"errors {p.failed}  in flight {p.in_flight}  {fmt.num(rate, '.1f')} req/s  "
            f"{fmt.duration(p.elapsed_s)}" + (f"  {p.message}" if p.message else "")
        )

    def on_bench_done(self, message: BenchDone) -> None:
        self.running = False
        if message.result is None or message.paths is None:
            self._status(
                Text(f"bench {message.error}", style="red" if message.error != "cancelled" else "yellow")
            )
            return
        result = message.result
        self.steps = list(result.steps)
        self.query_one("#bench-steps", Static).update(
            "\n".join([STEP_HEAD, *(step_line(s) for s in self.steps)])
        )
        self.query_one("#bench-plot", Static).update(plot_text(self.steps, self.size.width - 40))
        json_path, csv_path = message.paths
        self._status(
            Text(
                f"done{': ' + result.stop_reason if result.stop_reason else ''}  results: {json_path} "
                f"and {csv_path.name} (kept in the flag history)",
                style="green",
            )
        )
