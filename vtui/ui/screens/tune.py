"""The tune screen (`T`): start, follow and abort `vtui tune` on the selected instance.

The tune never runs in the dashboard: ctrl+r starts `vtui tune LAYOUT NAME --detach` (its own session,
so it goes on when the dashboard closes or the SSH connection drops), and the screen follows the tune's
progress file (vtui.tune.progress), read in a thread worker once a second and only when it changed:
the trial in progress, the table of trials (flags, launched or scored from the plan, goodput, TTFT p95,
meets the SLO, the planner's prediction beside the measured KV peak), and a plot of goodput against
TTFT p95 with the SLO line and the Pareto front. ctrl+x aborts (the tune puts the original flags back;
a tune whose process was killed is restored with `--restore`), ctrl+u resumes an unfinished one.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, Static

from vtui.core.selfrun import module_argv
from vtui.tune import progress
from vtui.tune.search import pareto_front
from vtui.ui import fmt
from vtui.ui.keymap import TUNE_BINDINGS
from vtui.ui.screens.base import StoreScreen
from vtui.ui.store import Store
from vtui.ui.widgets.footer import LeanFooter
from vtui.ui.widgets.ordered_input import OrderedInput, after_typing
from vtui.ui.widgets.titlebar import TitleBar

# (option, label, default, width): empty means the tune's own default (the load: the instance's max
# concurrency from its startup log)
FIELDS = (
    ("ttft-p95-ms", "SLO: TTFT p95 ms", "500", 7),
    ("concurrency", "load", "", 5),
    ("input-len", "in", "256", 6),
    ("output-len", "out", "64", 5),
    ("max-trials", "trials", "24", 4),
)
POLL_S = 1.0


def launch(argv: list[str]) -> tuple[int, str]:
    """Run a short `vtui tune …` command (`--detach`, `--restore`) and return (exit code, its output)."""
    try:
        done = subprocess.run(
            module_argv("vtui", "tune", *argv),
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return done.returncode, (done.stdout + done.stderr).strip()


class TuneRead(Message):
    """The progress file as read (its text, immutable) and whether its tune still runs."""

    def __init__(self, text: str | None, state: str | None, stamp: tuple[float, int] | None) -> None:
        super().__init__()
        self.text, self.state, self.stamp = text, state, stamp


class TuneLaunched(Message):
    def __init__(self, what: str, code: int, output: str) -> None:
        super().__init__()
        self.what, self.code, self.output = what, code, output


def _changed(changed: dict[str, Any]) -> str:
    return " ".join(f"{k}={fmt.flag_value(v)}" for k, v in changed.items()) or "(starting flags)"


def _ms(value: object) -> str:
    return f"{value:.0f}ms" if isinstance(value, (int, float)) else fmt.DASH


SHORT = {
    "max-num-seqs": "seqs",
    "max-num-batched-tokens": "batched",
    "gpu-memory-utilization": "util",
    "max-model-len": "len",
    "enable-chunked-prefill": "chunked",
    "enable-prefix-caching": "prefix",
    "kv-cache-dtype": "kv",
}
STAGES = {"baseline": "start", "concurrency": "conc", "latency": "lat", "re-measure": "again"}
TABLE_HEAD = (
    f"  {'#':>2} {'stage':<6} {'run':<4} {'req/s':>7} {'TTFT95':>6} {'SLO':<3} {'holds':>5} "
    f"{'KV pk':>5} {'pre':>3}  change"
)


def _short(changed: dict[str, Any]) -> str:
    return " ".join(f"{SHORT.get(k, k)}={fmt.flag_value(v)}" for k, v in changed.items()) or "(start)"


def trials_text(doc: dict[str, Any] | None) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append("Trials", style="bold")
    out.append("  (plan = scored from the planner, no restart; holds = planned requests)\n", style="dim")
    out.append(TABLE_HEAD + "\n", style="dim")
    trials = (doc or {}).get("trials") or []
    if not trials:
        out.append("  (none yet)\n", style="dim")
        return out
    best = ((doc or {}).get("best") or {}).get("flags")
    for t in trials:
        m = t.get("measurement") or {}
        pred = t.get("prediction") or {}
        failed = str(t.get("infeasible") or "").startswith(progress.FAILED_PREFIX)
        run = "fail" if failed else "yes" if t.get("launched") else "plan"
        ok = t.get("meets_slo")
        stage = STAGES.get(t["stage"], t["stage"])
        line = (
            f"  {t['index']:>2} {stage[:6]:<6} {run:<4} {fmt.num(m.get('req_per_s'), '.2f'):>7} "
            f"{_ms(m.get('ttft_p95_ms')):>6} {('yes' if ok else 'no') if m else fmt.DASH:<3} "
            f"{fmt.num(pred.get('workload_concurrency'), '.0f'):>5} {fmt.pct(m.get('kv_peak')):>5} "
            f"{fmt.num(m.get('preemptions')):>3}  "
        )
        style = "green" if ok else "red" if failed else "dim" if not t.get("launched") else ""
        out.append(line, style=style)
        out.append(_short(t.get("changed") or {}))
        if best is not None and t.get("flags") and all(t["flags"].get(k) == v for k, v in best.items()):
            out.append("  ← best", style="bold green")
        if t.get("infeasible"):
            out.append(f"\n       {t['infeasible']}", style="dim")
        out.append("\n")
    return out


def status_text(doc: dict[str, Any] | None, state: str | None, now: float) -> Text:
    if doc is None:
        return Text(
            "No tune of this instance yet. Set the SLO and the load, then ctrl+r: the tune runs detached "
            "(it goes on if the dashboard closes), restarting only this instance, one trial at a time.",
            style="dim",
        )
    out = Text()
    label = {"running": "running", "interrupted": "INTERRUPTED (its process died)"}.get(state or "", state)
    out.append(f"{label}", style="bold yellow" if state == "running" else "bold")
    trials = doc.get("trials") or []
    launched = sum(1 for t in trials if t.get("launched"))
    planned = sum(1 for t in trials if not t.get("launched"))
    obj = doc.get("objective") or {}
    slo = f"TTFT p95 ≤ {obj['ttft_p95_ms']:g} ms" if obj.get("ttft_p95_ms") else "no TTFT SLO"
    load = (doc.get("resolved") or {}).get("concurrency")
    out.append(
        f"  {launched} launched, {planned} from the plan, {doc.get('restarts', 0)} restarts · {slo} · load {load}"
    )
    if doc.get("replayed"):
        out.append(f" · resumed ({doc['replayed']} replayed)")
    cur = doc.get("current")
    if state == "running" and cur:
        since = cur.get("since")
        took = fmt.duration(now - since) if isinstance(since, (int, float)) else ""
        index = f"trial {cur['index']} " if cur.get("index") is not None else ""
        out.append(f"\nnow: {index}[{cur.get('stage')}] {_changed(cur.get('changed') or {})}: ", style="bold")
        out.append(f"{cur.get('phase')} {took}", style="cyan")
    best, base = doc.get("best"), doc.get("baseline")
    if best and base:
        out.append(
            f"\nbest: {fmt.num(best.get('goodput_rps'), '.2f')} req/s, TTFT p95 {_ms(best.get('ttft_p95_ms'))} "
            f"({'meets' if best.get('meets_slo') else 'misses'} the SLO) vs the start's "
            f"{fmt.num(base.get('goodput_rps'), '.2f')} req/s, {_ms(base.get('ttft_p95_ms'))}",
            style="bold green" if best.get("meets_slo") else "bold",
        )
    if doc.get("message"):
        out.append(f"\n{doc['message']}", style="dim")
    if state == "interrupted":
        out.append("\nctrl+u resumes it; ctrl+x puts its original flags back", style="yellow")
    return out


def plot_points(doc: dict[str, Any] | None) -> list[tuple[float, float, bool]]:
    """(TTFT p95 ms, goodput req/s, meets the SLO) of every measured trial."""
    points = []
    for t in (doc or {}).get("trials") or []:
        m = t.get("measurement") or {}
        if m.get("ttft_p95_ms") is not None and m.get("req_per_s") is not None:
            points.append((float(m["ttft_p95_ms"]), float(m["req_per_s"]), bool(t.get("meets_slo"))))
    return points


class TuneScreen(StoreScreen):
    BINDINGS = [*TUNE_BINDINGS]
    launcher = staticmethod(launch)  # tests swap in a fake

    def __init__(self, name: str) -> None:
        super().__init__()
        self.instance = name
        self.doc: dict[str, Any] | None = None
        self.state: str | None = None
        self._text: str | None = None
        self._stamp: tuple[float, int] | None = None
        self._plotted: object = None
        self._launching = False  # a `vtui tune` command is under way (one at a time)

    @property
    def progress_file(self) -> Path:
        return progress.progress_path(self.app.store.layout.session.name, self.instance)

    def compose(self) -> ComposeResult:
        yield TitleBar(f"tune {self.instance}", help_hint=False)
        with Horizontal(id="tune-form", classes="flag-row"):
            for key, label, default, width in FIELDS:
                yield Label(label, classes="tune-label")
                box = OrderedInput(default, name=key, id=f"tune-{key}", classes="flag-value tune-value")
                box.styles.width = width + 2
                yield box
        yield Static(id="tune-status")
        with VerticalScroll(id="tune-body"):
            yield Static(id="tune-table")
            from textual_plotext import PlotextPlot  # imported on first use: not on the dashboard's path

            yield PlotextPlot(id="tune-plot")
        yield LeanFooter(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.query_one(TitleBar).refresh_from(self.app.store)
        self._show()
        self._poll()
        self.set_interval(POLL_S, self._poll)

    def refresh_view(self, store: Store, names: Iterable[str] | None = None) -> None:
        self.query_one(TitleBar).refresh_from(store)
        if self.state == "running":
            self.query_one("#tune-status", Static).update(status_text(self.doc, self.state, self.app.clock()))

    # -- following the progress file (a thread: never the UI's loop) ---------------------------------
    def _poll(self) -> None:
        self._read(self.progress_file, self._stamp)

    @work(exclusive=True, thread=True, group="tune-poll", exit_on_error=False)
    def _read(self, path: Path, stamp: tuple[float, int] | None) -> None:
        try:
            st = path.stat()
        except OSError:
            self.post_message(TuneRead(None, None, None))
            return
        now_stamp = (st.st_mtime, st.st_size)
        doc = progress.read(path)
        text = json.dumps(doc) if doc is not None and now_stamp != stamp else None
        self.post_message(TuneRead(text, progress.live_state(doc), now_stamp))

    def on_tune_read(self, message: TuneRead) -> None:
        self._stamp = message.stamp
        changed = message.state != self.state
        if message.text is not None and message.text != self._text:
            self._text, self.doc, changed = message.text, json.loads(message.text), True
        elif message.state is None and self.doc is not None:
            self._text, self.doc, changed = None, None, True
        self.state = message.state
        if changed:
            self._show()
            self.refresh_bindings()

    def _show(self) -> None:
        self.query_one("#tune-status", Static).update(status_text(self.doc, self.state, self.app.clock()))
        self.query_one("#tune-table", Static).update(trials_text(self.doc))
        self._plot()

    def _plot(self) -> None:
        points = plot_points(self.doc)
        obj = (self.doc or {}).get("objective") or {}
        slo = obj.get("ttft_p95_ms")
        key = (tuple(points), slo, self.app.theme)
        if key == self._plotted:
            return
        self._plotted = key
        widget = self.query_one("#tune-plot")
        plt = widget.plt  # type: ignore[attr-defined]
        plt.clear_data()
        plt.clear_figure()
        plt.title("goodput vs TTFT p95: ● meets the SLO, x misses it, line: Pareto front, │ SLO")
        plt.xlabel("TTFT p95 ms")
        plt.ylabel("req/s")
        good = [(x, y) for x, y, ok in points if ok]
        bad = [(x, y) for x, y, ok in points if not ok]
        if good:
            plt.scatter([x for x, _ in good], [y for _, y in good], marker="●", color="green")
        if bad:
            plt.scatter([x for x, _ in bad], [y for _, y in bad], marker="x", color="red")
        front = pareto_front([(x, y) for x, y, _ in points])
        if len(front) > 1:
            plt.plot([x for x, _ in front], [y for _, y in front], color="cyan")
        if slo:
            plt.vline(float(slo), color="yellow")
        if points:
            xs = [x for x, _, _ in points] + ([float(slo)] if slo else [])
            plt.xlim(0, max(xs) * 1.1)
            plt.ylim(0, max(y for _, y, _ in points) * 1.15)
        widget.refresh()

    # -- actions -------------------------------------------------------------------------------------
    def _layout_words(self) -> list[str] | None:
        store = self.app.store
        path = store.path or store.layout.path
        if path is None:
            self.notify(
                "a tune runs beside the session supervisor, which needs the layout in a file: save it "
                "first (ctrl+s)",
                severity="error",
            )
            return None
        return [str(Path(path).resolve()), self.instance]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "abort":
            return True if self.state in ("running", "interrupted") else None
        if action == "resume":
            return True if self.state in ("interrupted", "aborted", "failed") else None
        if action == "start":
            return None if self.state in ("running", "interrupted") else True
        return True

    def action_start(self) -> None:
        after_typing(self, self._start)

    def _start(self) -> None:
        view = self.app.store.views.get(self.instance)
        if view is None or view.state.name != "READY":
            state = view.state.name if view else "unknown"
            self.notify(f"{self.instance} is {state}: a tune starts from a READY instance", severity="error")
            return
        words = self._layout_words()
        if words is None:
            return
        argv = [*words, "--detach"]
        for key, *_ in FIELDS:
            value = self.query_one(f"#tune-{key}", Input).value.strip()
            if value:
                argv += [f"--{key}", value]
        if self._launching:
            self.notify("a tune is being started", severity="warning")
            return
        self.query_one("#tune-status", Static).update(Text("starting the tune …", style="cyan"))
        self._launch("start", argv)

    def action_abort(self) -> None:
        if self.state == "running" and self.doc is not None:
            if self.doc.get("job") == "supervisor":  # the supervisor runs it: cancel through its socket
                if (words := self._layout_words()) is not None:
                    self._launch("cancel", [*words, "--cancel", "--detach"])
            elif progress.abort(self.doc):
                self.notify("aborting: the tune puts the original flags back, then stops")
            return
        if self.state == "interrupted" and (words := self._layout_words()) is not None:
            self._launch("restore", [*words, "--restore"])

    def action_resume(self) -> None:
        if (words := self._layout_words()) is not None:
            self._launch("resume", [*words, "--resume", "--detach"])

    def action_back(self) -> None:
        self.app.pop_screen()  # the tune runs on; T shows it again

    def _launch(self, what: str, argv: Sequence[str]) -> None:
        self._launching = True
        self._run_launcher(what, list(argv))

    @work(thread=True, group="tune-launch", exit_on_error=False)
    def _run_launcher(self, what: str, argv: list[str]) -> None:
        code, output = type(self).launcher(list(argv))
        self.post_message(TuneLaunched(what, code, output))

    def on_tune_launched(self, message: TuneLaunched) -> None:
        self._launching = False
        if message.code == 0:
            self.notify(f"tune {message.what}: {message.output.splitlines()[0] if message.output else 'ok'}")
        else:
            self.notify(f"tune {message.what} failed: {message.output[-300:]}", severity="error", timeout=10)
        self._stamp = None
        self._poll()
