"""One instance in depth: history plots, startup facts, flags and exact command line, diagnosis + fixes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from enum import Enum

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.widgets import Static

from vtui.telemetry.metrics import HistoryPoint
from vtui.ui import fmt, planning
from vtui.ui.actions import serving
from vtui.ui.keymap import DETAIL_BINDINGS, INSTANCE_BINDINGS
from vtui.ui.screens.base import InstanceScreen
from vtui.ui.store import InstanceView, Store
from vtui.ui.widgets.footer import LeanFooter
from vtui.ui.widgets.instance_pane import head_lines
from vtui.ui.widgets.notices import NoticeLine
from vtui.ui.widgets.palette import palette_of
from vtui.ui.widgets.scrollbars import whole_cell_scrollbars
from vtui.ui.widgets.titlebar import TitleBar

# The history plots (textual-plotext): title, y label, and the series (label, value of a sample).
PLOTS = (
    ("KV cache usage", "%", (("KV %", lambda s: s.kv_usage * 100 if s.kv_usage is not None else None),)),
    ("requests", "requests", (("running", lambda s: s.running), ("waiting", lambda s: s.waiting))),
    ("throughput", "tok/s", (("prompt", lambda s: s.prompt_tps), ("generation", lambda s: s.generation_tps))),
    ("TTFT p95", "ms", (("TTFT p95", lambda s: s.ttft_p95 * 1000 if s.ttft_p95 is not None else None),)),
)
WINDOWS = ((300.0, "5 min"), (3600.0, "1 h"))  # `w` switches; 1 h reads the 10 s history
PLOT_EVERY_S = 2.0  # plotext redraws a whole plot: at most every 2 s


def operation_text(view: InstanceView) -> str | None:
    """The instance's operation queue in the supervisor: the operation that runs and the one that waits
    behind it (None: nothing runs)."""
    st = view.status
    if st is None or (st.operation is None and st.waiting is None):
        return None
    running = f"operation: {st.operation} running" if st.operation else "operation: none running"
    return running + (f"; {st.waiting} waits its turn" if st.waiting else "")


def facts_text(view: InstanceView) -> Text:
    out = Text("Startup facts\n", style="bold")
    facts = view.facts
    if facts is None:
        out.append("  -- (known once the instance has started)\n", style="dim")
        return out
    shown = 0
    for f in dataclasses.fields(facts):
        value = getattr(facts, f.name)
        if value is None or value == () or value == {}:
            continue
        shown += 1
        value = value.value if isinstance(value, Enum) else value
        label, text = fmt.fact(f.name, value)
        out.append(f"  {label:<26} {text}\n")
    if not shown:
        out.append("  --\n", style="dim")
    return out


def flags_text(view: InstanceView) -> Text:
    spec = view.spec
    out = Text("Flags\n", style="bold")
    if spec is None:
        return out
    for name, value in sorted(spec.flags.items()):
        out.append(f"  --{name:<28} {fmt.flag_value(value)}\n")
    if not spec.flags:
        out.append("  (vLLM defaults)\n", style="dim")
    out.append("Command line (c copies it)\n", style="bold")
    out.append(f"  {spec.command_line()}\n", style="cyan")
    return out


def diagnosis_text(view: InstanceView) -> Text:
    out = Text("Diagnosis\n", style="bold")
    problems = view.all_problems
    if not problems:
        out.append("  no problems found\n", style="dim")
    for i, problem in enumerate(problems[:9]):
        out.append(f"  [{i + 1}] " if i < 3 else "      ", style="bold yellow")
        out.append(f"{problem.message}\n", style="red")
        if problem.explanation:
            out.append(f"      {problem.explanation}\n")
        for remedy in problem.remedies[:4]:
            out.append(f"      - {remedy}\n", style="dim")
        if problem.fix:
            fix = " ".join(f"--{k} {fmt.flag_value(v)}" for k, v in problem.fix.items())
            key = f"press {i + 1}: " if i < 3 else ""
            out.append(f"      fix: {key}restart with {fix}\n", style="green")
    return out


def _bought(rec, prev) -> str:
    """What a flag change bought: KV tokens, max concurrency, best bench tok/s against the previous set."""
    if prev is None:
        return ""
    parts = []
    if rec.kv_tokens is not None and prev.kv_tokens:
        parts.append(
            f"KV {rec.kv_tokens - prev.kv_tokens:+,} tok ({(rec.kv_tokens / prev.kv_tokens - 1):+.0%})"
        )
    if rec.max_concurrency is not None and prev.max_concurrency:
        parts.append(f"conc {rec.max_concurrency - prev.max_concurrency:+.1f}x")
    new_tps = (rec.bench or {}).get("best_out_tps")
    old_tps = (prev.bench or {}).get("best_out_tps")
    if new_tps is not None and old_tps:
        parts.append(f"bench tok/s {(new_tps / old_tps - 1):+.0%}")
    return ", ".join(parts)


def history_text(view: InstanceView) -> Text:
    out = Text("Flag history (what each set produced; what a change bought)\n", style="bold")
    prev: dict = {}
    last_measured = None  # the previous entry with figures, for the deltas
    for rec in view.flag_history:
        changed = {k: v for k, v in rec.flags.items() if prev.get(k) != v}
        removed = [k for k in prev if k not in rec.flags]
        delta = " ".join(
            [f"{k}={fmt.flag_value(v)}" for k, v in changed.items()] + [f"-{k}" for k in removed]
        )
        out.append(
            f"  {rec.outcome:<8} KV {fmt.tokens(rec.kv_tokens):>7} tok  conc {fmt.num(rec.max_concurrency, '.1f'):>6}  ",
            style="green" if rec.outcome == "ready" else "red" if rec.outcome == "failed" else "",
        )
        out.append(delta or "(same flags)")
        if rec.note:
            out.append(f"  [{rec.note}]", style="dim")
        if rec.error:
            out.append(f"  {rec.error[:80]}", style="red")
        if rec.bench:
            out.append(
                f"\n           bench {rec.bench.get('mode')}: best {fmt.rate(rec.bench.get('best_out_tps'))} "
                f"tok/s at {rec.bench.get('best_step')}",
                style="cyan",
            )
        if rec.outcome == "ready" and (bought := _bought(rec, last_measured)):
            out.append(f"\n           bought: {bought}", style="bold")
        if rec.kv_tokens is not None or rec.bench:
            last_measured = rec
        out.append("\n")
        prev = rec.flags
    return out


class DetailScreen(InstanceScreen):
    BINDINGS = [*DETAIL_BINDINGS, *[b for b in INSTANCE_BINDINGS if b.action != "detail"]]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.instance = name
        self._planned_key: tuple | None = None
        self.window = 0  # index into WINDOWS
        self._plotted: tuple | None = None
        self._plotted_at = 0.0

    def selected_name(self) -> str | None:
        return self.instance

    def compose(self) -> ComposeResult:
        yield TitleBar(f"instance {self.instance}")
        with VerticalScroll(id="detail"):
            yield Static(id="detail-head")
            yield Static(id="detail-diagnosis")
            yield Static(id="plot-window", classes="plot-label")
            from textual_plotext import PlotextPlot  # imported on first use: not on the dashboard's path

            with Grid(id="plots"):
                for i in range(len(PLOTS)):
                    yield PlotextPlot(id=f"plot-{i}", classes="plot")
            yield Static(id="detail-facts")
            yield Static(id="detail-planned")
            yield Static(id="detail-flags")
            yield Static(id="detail-history")
        yield NoticeLine()
        yield LeanFooter(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        whole_cell_scrollbars(self.query_one("#detail", VerticalScroll))
        self.refresh_view(self.app.store)

    def refresh_view(self, store: Store, names: Iterable[str] | None = None) -> None:
        self.query_one(TitleBar).refresh_from(store)
        if names is not None and self.instance not in set(names):
            return
        view = store.views.get(self.instance)
        if view is None:
            return
        width = max(40, self.size.width - 4)
        now = self.app.clock()
        pal = palette_of(self.app)
        head = head_lines(view, store, now, width, pal)[:1]
        queue = operation_text(view)
        if queue is not None:
            head.append(Text(queue, style=pal.accent2))
            head[-1].truncate(width)
        self.query_one("#detail-head", Static).update(Text("\n").join(head))
        self._refresh_plots(view, now)
        self.query_one("#detail-diagnosis", Static).update(diagnosis_text(view))
        self.query_one("#detail-facts", Static).update(facts_text(view))
        self._refresh_planned(store, view)
        self.query_one("#detail-flags", Static).update(flags_text(view))
        self.query_one("#detail-history", Static).update(history_text(view))
        self.refresh_bindings_if_changed()

    def _refresh_plots(self, view: InstanceView, now: float) -> None:
        """The history over the chosen window, x in seconds (5 min) or minutes (1 h) before now."""
        span, label = WINDOWS[self.window]
        source = view.history if span <= 600 else view.long_history
        samples = [s for s in source if now - s.at <= span]
        key = (self.window, len(samples), samples[-1].at if samples else None, self.app.theme)
        if key == self._plotted or (
            self._plotted is not None
            and key[0] == self._plotted[0]
            and 0 <= now - self._plotted_at < PLOT_EVERY_S
        ):
            return
        self._plotted, self._plotted_at = key, now
        unit, scale = ("s", 1.0) if span <= 600 else ("min", 60.0)
        latest = HistoryPoint.of(view.sample) if view.sample else None  # the plots' figures, now
        self.query_one("#plot-window", Static).update(
            f"History: last {label} ({len(samples)} samples; w: {' / '.join(w for _, w in WINDOWS)})"
            + ("" if samples else "  -- no samples yet (the instance is not serving)")
        )
        xs = [(s.at - now) / scale for s in samples]
        for i, (title, ylabel, series) in enumerate(PLOTS):
            widget = self.query_one(f"#plot-{i}")
            plt = widget.plt  # type: ignore[attr-defined]
            plt.clear_data()
            plt.clear_figure()
            values = [fmt.num(fn(latest), ".0f") if latest else fmt.DASH for _, fn in series]
            if len(series) == 1:
                current = f"{values[0]} {ylabel}"
            else:
                current = ", ".join(f"{name} {v}" for (name, _), v in zip(series, values, strict=True))
            plt.title(f"{title}: {current}")
            plt.xlabel(f"{unit} before now")
            plt.ylabel(ylabel)
            plt.xlim(-span / scale, 0)
            if ylabel == "%":
                plt.ylim(0, 100)
            for name, fn in series:
                points = [(x, fn(s)) for x, s in zip(xs, samples, strict=True) if fn(s) is not None]
                if points:
                    plt.plot(
                        [x for x, _ in points],
                        [y for _, y in points],
                        label=name if len(series) > 1 else None,
                    )
            widget.refresh()

    def action_window(self) -> None:
        self.window = (self.window + 1) % len(WINDOWS)
        self._plotted = None
        view = self._view()
        if view is not None:
            self._refresh_plots(view, self.app.clock())

    def _refresh_planned(self, store: Store, view: InstanceView) -> None:
        """Re-plan only when the run's facts, the flags or the model config changed (it reads the log)."""
        spec = view.spec
        if spec is None:
            return
        loaded = self.app.model_configs.get(spec)
        key = (
            id(view.facts),
            view.facts is None,
            tuple(sorted(spec.flags.items(), key=lambda kv: kv[0])),
            loaded is not None,
        )
        if key == self._planned_key:
            return
        self._planned_key = key
        widget = self.query_one("#detail-planned", Static)
        if view.facts is None:
            widget.update("")
            return
        config, reason = loaded if loaded is not None else (None, None)
        gpu_gib = planning.gpu_memory_gib(spec, store.layout.session, store.gpu)
        result, why = planning.planned_for_run(
            config, spec, view.facts, gpu_gib, planning.device_of(spec, store.gpu)
        )
        widget.update(planning.planned_vs_reported_text(result, why or reason, view.facts))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "fix":
            view = self._view()
            index = parameters[0] if parameters and isinstance(parameters[0], int) else 0
            if view is None or index >= len(view.all_problems):
                return False  # no such problem: no "Fix N" key in the footer at all
            return True if view.all_problems[index].fix else None
        return super().check_action(action, parameters)

    def say_why_not(self, action: str) -> None:
        """A fix key that does nothing says why: no such problem, or no flag change fixes it."""
        if not action.startswith("fix("):
            super().say_why_not(action)
            return
        view = self._view()
        try:
            index = int(action[4:-1])
        except ValueError:
            return
        problems = view.all_problems if view is not None else []
        if index >= len(problems):
            self.app.notices.say_why_not(f"{self.instance}: no problem {index + 1} diagnosed")
        else:
            self.app.notices.say_why_not(
                f"{self.instance}: no flag change fixes problem {index + 1} ({problems[index].kind}); "
                "its remedies are listed under it"
            )

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_copy_command(self) -> None:
        view = self._view()
        if view and view.spec:
            self.app.copy_to_clipboard(view.spec.command_line())
            self.notify("command line copied (OSC 52)")

    def action_fix(self, index: int) -> None:
        view = self._view()
        problems = view.all_problems if view is not None else []
        if view is None or view.spec is None or index >= len(problems) or not problems[index].fix:
            return
        fix = dict(problems[index].fix or {})
        port, host = fix.pop("port", None), fix.pop("host", None)  # spec fields, not vLLM flags
        spec = view.spec.with_flags(
            {k: v for k, v in fix.items() if isinstance(v, bool | int | float | str | list)},
            unset=[k for k, v in fix.items() if v is None],
        )
        if isinstance(port, int):
            spec = dataclasses.replace(spec, port=port)
        if isinstance(host, str):
            spec = dataclasses.replace(spec, host=host)
        self.app.control.review_and_restart(
            self.instance, spec, note=f"fix: {problems[index].kind}", label="fix", fallback=serving(view)
        )
