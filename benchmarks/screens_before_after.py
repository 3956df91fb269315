"""Before/after pictures of every vtui screen (issue 15's closing note): one scenario, two checkouts.

    python benchmarks/screens_before_after.py [--before DIR] [--after DIR] [--out DIR] [--only NAME ...]

For each side the script runs itself as a child with PYTHONPATH=DIR (so the old checkout's code draws the
old screens), drives the real app (`make_app` on the fake supervisor, Textual's Pilot, `run_test(size=…)`)
to each screen the user can reach, and saves an SVG and the plain text of the screen at 120x40 and 80x24
under OUT/{before,after}/NAME-WxH.{svg,txt}, plus OUT/SIDE/index.json (reached or not, and why). The
parent then writes OUT/README.md: a table per screen and the 80x24 text of the dashboard and detail.

Deterministic: a fixed clock, fixed metrics/GPU samples (the UI tests' conftest values), one interpreter
path, private state/config dirs. Defaults: --before /tmp/screens-before (`git worktree add
/tmp/screens-before 2cf1f06`, the commit before the dashboard-v2 work), --after this checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import inspect
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import _smoke

ROOT = Path(__file__).resolve().parent.parent
SIZES = ((120, 40), (80, 24))
SVG_LIMIT = 100_000  # bytes: above it only the 120x40 SVG is kept (the text is kept at both sizes)
NOW = 1_700_000_000.0
GIB = 2**30
HISTORY_S = 300  # seconds of samples before the pictures: the detail plots' 5 min window

LOG_LINES = [
    "INFO 12-01 13:00:00 [api_server.py:1200] vLLM API server version 0.11.0",
    "INFO 12-01 13:00:01 [model_runner.py:1100] Loading weights took 15.27 GiB and 1.62 seconds",
    'INFO:     127.0.0.1:40112 - "GET /metrics HTTP/1.1" 200 OK',
    "WARNING 12-01 13:00:02 [config.py:400] max_num_batched_tokens is below max_model_len",
    'INFO:     127.0.0.1:40113 - "GET /health HTTP/1.1" 200 OK',
    "INFO 12-01 13:00:03 [gpu_worker.py:300] GPU KV cache size: 81,920 tokens",
    "INFO 12-01 13:00:04 [api_server.py:1300] Starting vLLM API server on http://0.0.0.0:8001",
    *[
        line
        for i in range(8)
        for line in (
            f"INFO 12-01 13:00:{5 + i:02d} [loggers.py:123] Engine 000: Avg generation throughput: {300 + i}.0",
            f'INFO:     127.0.0.1:{40114 + i} - "GET /metrics HTTP/1.1" 200 OK',
        )
    ],
    "ERROR 12-01 13:00:14 [serving.py:99] request 42 failed: context length exceeded",
    *[
        line
        for i in range(20)
        for line in (
            f"INFO 12-01 13:00:{15 + i:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {1200 + i}.0",
            f'INFO:     127.0.0.1:{40130 + i} - "GET /health HTTP/1.1" 200 OK',
        )
    ],
]

# name: (title, what the user does to get there, what changed from before to after)
SCREENS: dict[str, tuple[str, str, str]] = {
    "dashboard": (
        "Dashboard, ready under load",
        "start vtui; 5 min of samples for qwen, llama and embed, coder loading weights",
        "Cards with one unaligned line of numbers each (and 20 empty rows at 120x40) became an aligned "
        "fleet table (state and STARTING phase, GPUs, KV bar and tokens, run against max-num-seqs or "
        "vLLM's default, tok/s, TTFT p95, hit rate, a trend column) with an ALL row; the selected "
        "instance's labelled sparklines with their scale; the GPU panel's letter bars (`qqqq…`) became "
        "solid memory/utilization bars and a per-process table (PID, instance or other, GiB, command).",
    ),
    "detail": (
        "Detail",
        "enter on qwen",
        "The one-line numbers and four unlabelled two-row sparklines (no axes, no scale) became plots "
        "with axes, units and titles over a 5 min / 1 h window (`w`); the header no longer pads the "
        "name and says max-num-seqs.",
    ),
    "detail-crashed": (
        "Detail of a crashed instance (diagnosis)",
        "qwen crashes (max-model-len too big), then enter",
        "The same diagnosis and fixes; the history below is the new plots.",
    ),
    "flags": (
        "Flag editor, with the planner panel",
        "f on qwen",
        "`↑`/`↓` move between fields and the footer says so; a line names the flag schema in use. The "
        "planner has no screen of its own in either version: it is this panel (KV tokens, concurrency, "
        "fit) and the presets.",
    ),
    "diff": (
        "Flag diff before restart",
        "f, max-num-seqs = 64, ctrl+r",
        "The dialog says that esc closes it.",
    ),
    "presets": (
        "Presets (A/B, from the planner)",
        "p on qwen",
        "The presets also set --performance-mode (throughput / interactivity).",
    ),
    "logs": (
        "Log view",
        "l on qwen (the log's last lines alternate with vtui's GET /health probes)",
        "vtui's own /metrics and /health access lines are hidden by default, with a status line that "
        "counts them (`P` shows them); the view follows forever with a bounded ring.",
    ),
    "help": (
        "Help",
        "?",
        "New keys (command line, filter, sort, theme, sleep, tune, log probes, field moves); the title "
        "says esc closes it.",
    ),
    "bench": (
        "Bench",
        "B on qwen",
        "Requests per step is said to be at least the concurrency; the table's header fits "
        "(`req/sout tok/s` before).",
    ),
    "confirm-stop": (
        "Stop confirmation",
        "x on qwen",
        "Before: `x` stopped qwen at once, no question (the before picture is the dashboard right after "
        "`x`); after: a confirmation (settings.toml's `confirm = false` turns it off).",
    ),
    "confirm-restart": (
        "Restart confirmation",
        "r on qwen",
        "Before: `r` restarted at once (picture: the dashboard right after `r`); after: a confirmation.",
    ),
    "quit": ("Quit dialog", "q", "Says esc closes it."),
    "quit-unsaved": (
        "Quit with unsaved layout changes",
        "the running layout differs from the saved one, then q",
        "Before: the plain quit dialog, no warning (and `s` lost the edits); after: a warning and `w` "
        "to save first.",
    ),
    "save-as": ("Save layout as", "S", "Says esc closes it."),
    "filter": ("Dashboard `/` filter", "/ then `ll`", "New: the before code has no filter."),
    "command-line": (
        "`:` command line",
        ": then `restart l` (the completion shows)",
        "New: the before code has no command line.",
    ),
    "tune": (
        "Tune (a tune in progress)",
        "T on qwen (a recorded progress file)",
        "New: the before code has no tune screen.",
    ),
    "theme-light": ("Dashboard, light theme", "ctrl+t", "New: the before code has one (dark) theme."),
    "theme-high-contrast": (
        "Dashboard, high-contrast theme",
        "ctrl+t twice",
        "New: the before code has one (dark) theme.",
    ),
}


# Seen in the after pictures, for whoever works on the screens next (facts about this scenario's frames).
OBSERVATIONS = (
    "The fleet table's trend column (`G tok/s~`) is one-row `palette.spark`, scaled from 0 to its own "
    "maximum: a steady rate (here 240-243 tok/s over its last 8 points) draws a solid bar on every row at "
    "120x40, so the column shows little of a trend.",
    "At 80x24 the GPU panel's process table shows 3 of the 6 processes, with nothing saying that more exist.",
)


# -- the child: one checkout's app -----------------------------------------------------------------------
class Absent(Exception):
    """The screen does not exist in this checkout (the message says why)."""


def _build(fields_of: Any, values: dict[str, Any]) -> Any:
    """`fields_of(**values)` with only the fields this checkout's dataclass has."""
    names = {f.name for f in dataclasses.fields(fields_of)}
    return fields_of(**{k: v for k, v in values.items() if k in names})


class Scenario:
    """The layout, samples and app of one run, built with whatever this checkout's API is."""

    def __init__(self) -> None:
        from vtui.core.model import InstanceSpec, Layout, SessionSpec
        from vtui.testing.fake_supervisor import FakeSupervisor

        self.layout = Layout(
            SessionSpec("demo"),
            (
                InstanceSpec(
                    "qwen",
                    "Qwen/Qwen3-8B",
                    8001,
                    engine="sim",
                    gpus=(0, 1),
                    flags={
                        "tensor-parallel-size": 2,
                        "max-num-seqs": 256,
                        "max-model-len": 8192,
                        "gpu-memory-utilization": 0.9,
                    },
                ),
                InstanceSpec(
                    "llama",
                    "meta-llama/Llama-3.1-8B-Instruct",
                    8002,
                    engine="sim",
                    gpus=(2,),
                    flags={"max-num-seqs": 128},
                ),
                InstanceSpec(
                    "embed",
                    "BAAI/bge-m3",
                    8003,
                    engine="sim",
                    gpus=(3,),
                    flags={"gpu-memory-utilization": 0.3},
                ),
                InstanceSpec(
                    "coder",
                    "Qwen/Qwen2.5-Coder-1.5B-Instruct",
                    8004,
                    engine="sim",
                    gpus=(3,),
                    flags={"gpu-memory-utilization": 0.5},
                ),
            ),
        )
        self.fake = FakeSupervisor(self.layout, clock=lambda: NOW - 3725)

    def gpu_sample(self) -> Any:
        from vtui.telemetry.gpu import GpuInfo, GpuProcess, GpuSample

        gpus = tuple(
            GpuInfo(
                i,
                "NVIDIA H200",
                int((80 - 8 * i) * GIB) if i < 3 else int(118 * GIB),
                int(141 * GIB),
                88.0 - i * 10,
                61.0 + i,
                420.0 - i * 30,
                700.0,
            )
            for i in range(4)
        )
        rows = [
            (0, 40000, 76, "qwen", None),
            (1, 40001, 76, "qwen", None),
            (2, 40002, 70, "llama", None),
            (2, 999, 6, None, "python3 train.py --epochs 3"),
            (3, 40003, 42, "embed", None),
            (3, 40004, 70, "coder", None),
        ]
        # the before code's GpuProcess has no `command` (an "other" process showed no command line)
        has_command = "command" in {f.name for f in dataclasses.fields(GpuProcess)}
        procs = tuple(
            GpuProcess(gpu, pid, int(gib * GIB), owner, command)
            if has_command
            else GpuProcess(gpu, pid, int(gib * GIB), owner)
            for gpu, pid, gib, owner, command in rows
        )
        return GpuSample(True, None, gpus, procs, NOW)

    def metrics(self, instance: str, at: float, **overrides: Any) -> Any:
        from vtui.telemetry.metrics import MetricsSample, Percentiles

        values: dict[str, Any] = dict(
            instance=instance,
            at=at,
            running=12.0,
            waiting=3.0,
            waiting_by_reason={},
            kv_usage=0.61,
            kv_capacity_tokens=20480,
            block_size=16,
            prompt_tps=1234.0,
            generation_tps=567.0,
            ttft=Percentiles(0.12, 0.45, 0.9),
            itl=Percentiles(0.02, 0.04, 0.05),
            e2e=Percentiles(1.0, 2.0, 3.0),
            queue=Percentiles(0.01, 0.05, 0.1),
            preemptions_per_s=0.0,
            prefix_hit_rate=0.45,
            success_per_s=4.0,
            abort_per_s=0.0,
            error_per_s=0.0,
            prompt_tokens_total=1e6,
            generation_tokens_total=5e5,
            preemptions_total=0.0,
            prefix_cache_queries_total=100.0,
            prefix_cache_hits_total=45.0,
            counter_reset=False,
            vllm_names="v1",
        )
        values.update(overrides)
        return _build(MetricsSample, values)

    def app(self) -> Any:
        from vtui.ui.app import make_app

        sample = self.gpu_sample()

        class FixedGpu:
            def __call__(self, on_sample: Callable[[Any], None], pid_owner: Any) -> FixedGpu:
                self.on_sample = on_sample
                return self

            def start(self) -> None:
                self.on_sample(sample)

            def stop(self) -> None:
                pass

        kw: dict[str, Any] = {}
        params = inspect.signature(make_app).parameters
        if "settings" in params:  # after: the defaults, never the user's settings.toml
            from vtui.ui.settings import UiSettings

            kw["settings"] = UiSettings()
        return make_app(supervisor=self.fake, gpu_sampler=FixedGpu(), clock=lambda: NOW, **kw)


def binding_ids() -> set[str]:
    from vtui.ui import keymap

    return keymap.all_binding_ids()


async def settle(pilot: Any, n: int = 4) -> None:
    from textual.widgets import Input

    for _ in range(n):
        await pilot.pause()
    groups = ("diagnosis", "control", "config", "tune-poll", "tune-launch")
    pending = [w for w in pilot.app.workers if w.group in groups]
    if pending:
        await pilot.app.workers.wait_for_complete(pending)
    for box in pilot.app.screen.query(Input):
        box.cursor_blink = False  # on or off by the clock otherwise
    await pilot.pause()


async def load(pilot: Any, sc: Scenario) -> None:
    """The fleet ready under load: 5 min of samples (one a second) for three instances, coder still
    loading weights. Smooth, fixed curves (no randomness): both sides get the very same samples."""
    from vtui.core.state import Phase, State
    from vtui.telemetry.metrics import Percentiles
    from vtui.ui.messages import MetricsArrived

    await settle(pilot)
    sc.fake.set_state("coder", State.STARTING, Phase.LOADING_WEIGHTS)
    fleet = (("qwen", 1.0, 1.0, 0.45), ("llama", 0.4, 0.6, 0.71), ("embed", 0.1, 0.1, 0.0))
    for i in range(HISTORY_S):
        wave, slow = math.sin(i / 17), math.sin(i / 41)
        for name, scale, lat, hit in fleet:
            pilot.app.on_metrics_arrived(
                MetricsArrived(
                    sc.metrics(
                        name,
                        at=NOW - HISTORY_S + i,
                        ttft=Percentiles(0.12 * lat, (0.45 + 0.1 * slow) * lat, 0.9 * lat),
                        itl=Percentiles(0.02 * lat, 0.04 * lat, 0.05 * lat),
                        prefix_hit_rate=hit,
                        generation_tps=scale * (300 + 60 * wave),
                        prompt_tps=scale * (1200 + 200 * slow),
                        kv_usage=scale * (0.3 + 0.55 * i / HISTORY_S),
                        running=float(round(scale * (12 + 3 * wave))),
                        waiting=float(i % 4) if scale > 0.2 else 0.0,
                    )
                )
            )
    pilot.app.repaint()
    await settle(pilot)


async def press(pilot: Any, *keys: str) -> None:
    await pilot.press(*keys)
    await settle(pilot)


def need(binding: str, what: str) -> None:
    if binding not in binding_ids():
        raise Absent(f"{what}: no such key in this version (binding {binding} absent)")


async def s_dashboard(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)


async def s_detail(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)
    await press(pilot, "enter")


async def s_detail_crashed(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)
    data = Path(os.environ["VTUI_SCREENS_CHECKOUT"]) / "tests" / "ui" / "data" / "max_model_len_too_big.log"
    sc.fake.crash("qwen", data.read_text().splitlines())
    await settle(pilot, 6)
    await press(pilot, "enter")


async def s_flags(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)
    await press(pilot, "f")


async def s_diff(pilot: Any, sc: Scenario) -> None:
    await s_flags(pilot, sc)
    pilot.app.screen.query_one("#flag-max-num-seqs").value = "64"
    await settle(pilot)
    await press(pilot, "ctrl+r")


async def s_presets(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)
    await press(pilot, "p")


async def s_logs(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)
    sc.fake.emit_logs("qwen", LOG_LINES)
    await settle(pilot)
    await press(pilot, "l")


async def s_help(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)
    await press(pilot, "question_mark")


async def s_bench(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)
    await press(pilot, "B")


async def s_confirm_stop(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)
    await press(pilot, "x")


async def s_confirm_restart(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)
    await press(pilot, "r")


async def s_quit(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)
    await press(pilot, "q")


async def s_quit_unsaved(pilot: Any, sc: Scenario) -> None:
    """The layout as saved differs from the running one (as after an applied flag edit)."""
    await load(pilot, sc)
    store = pilot.app.store
    store.saved_layout = dataclasses.replace(store.layout, instances=store.layout.instances[:-1])
    pilot.app.repaint()
    await settle(pilot)
    await press(pilot, "q")


async def s_save_as(pilot: Any, sc: Scenario) -> None:
    await load(pilot, sc)
    await press(pilot, "S")


async def s_filter(pilot: Any, sc: Scenario) -> None:
    need("dashboard.filter", "the dashboard filter")
    await load(pilot, sc)
    await press(pilot, "slash", "l", "l")


async def s_command_line(pilot: Any, sc: Scenario) -> None:
    need("dashboard.command", "the command line")
    await load(pilot, sc)
    await press(pilot, "colon", *"restart l")
    await pilot.pause(0.2)  # the completion is looked up in a worker
    await settle(pilot)


async def s_tune(pilot: Any, sc: Scenario) -> None:
    need("instance.tune", "the tune screen")
    from vtui.tune import progress

    doc = json.loads(
        (
            Path(os.environ["VTUI_SCREENS_CHECKOUT"]) / "tests" / "ui" / "data" / "tune_progress.json"
        ).read_text()
    )
    doc["session"], doc["instance"] = "demo", "qwen"
    doc["pid"], doc["pid_started"] = progress.own_identity()  # a live tune: this process
    progress.write(progress.progress_path("demo", "qwen"), doc)
    await load(pilot, sc)
    await press(pilot, "T")
    await settle(pilot, 6)


async def s_theme(pilot: Any, sc: Scenario, presses: int) -> None:
    need("app.theme", "themes")
    await load(pilot, sc)
    for _ in range(presses):
        await press(pilot, "ctrl+t")
    pilot.app.clear_notifications()  # the "theme: …" toast
    await pilot.pause(0.5)  # styles recomputed for the new theme everywhere (once, a hint line lagged)
    await settle(pilot)


async def s_theme_light(pilot: Any, sc: Scenario) -> None:
    await s_theme(pilot, sc, 1)


async def s_theme_high_contrast(pilot: Any, sc: Scenario) -> None:
    await s_theme(pilot, sc, 2)


DRIVERS: dict[str, Callable[[Any, Scenario], Awaitable[None]]] = {
    "dashboard": s_dashboard,
    "detail": s_detail,
    "detail-crashed": s_detail_crashed,
    "flags": s_flags,
    "diff": s_diff,
    "presets": s_presets,
    "logs": s_logs,
    "help": s_help,
    "bench": s_bench,
    "confirm-stop": s_confirm_stop,
    "confirm-restart": s_confirm_restart,
    "quit": s_quit,
    "quit-unsaved": s_quit_unsaved,
    "save-as": s_save_as,
    "filter": s_filter,
    "command-line": s_command_line,
    "tune": s_tune,
    "theme-light": s_theme_light,
    "theme-high-contrast": s_theme_high_contrast,
}
assert set(DRIVERS) == set(SCREENS)


def screen_lines(app: Any) -> str:
    """The screen as text: the strips vtui.ui.textdump.screen_text reads (it is not in the before code).
    A modal shows alone: vtui.tcss gives every Screen, modals too, a solid background."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips).rstrip("\n") + "\n"


async def capture(name: str, size: tuple[int, int], out: Path) -> dict[str, Any]:
    sc = Scenario()
    app = sc.app()
    w, h = size
    async with app.run_test(size=size) as pilot:
        try:
            await DRIVERS[name](pilot, sc)
        except Absent as exc:
            return {"reached": False, "why": str(exc)}
        svg = app.export_screenshot(title=f"vtui {name} {w}x{h}")
        text = screen_lines(app)
        shown = type(app.screen).__name__
    stem = f"{name}-{w}x{h}"
    (out / f"{stem}.txt").write_text(text, encoding="utf-8")
    files = [f"{stem}.txt"]
    if len(svg.encode()) <= SVG_LIMIT or size == SIZES[0]:
        (out / f"{stem}.svg").write_text(svg, encoding="utf-8")
        files.append(f"{stem}.svg")
    return {"reached": True, "screen": shown, "files": files, "svg_bytes": len(svg.encode())}


def child(side: str, out: Path, only: list[str]) -> int:
    import vtui

    checkout = Path(os.environ["VTUI_SCREENS_CHECKOUT"]).resolve()
    if not Path(vtui.__file__).resolve().is_relative_to(checkout):
        print(f"vtui imported from {vtui.__file__}, not from {checkout}", file=sys.stderr)
        return 2
    sys.executable = "/usr/bin/python3"  # a sim's command line starts with it: one fixed path
    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "index.json"
    index: dict[str, Any] = json.loads(index_path.read_text()) if only and index_path.exists() else {}

    def git(*argv: str) -> str:
        return subprocess.run(
            ["git", "-C", str(checkout), *argv], capture_output=True, text=True
        ).stdout.strip()

    index["_commit"] = git("rev-parse", "--short", "HEAD")
    index["_vtui_commit"] = git("log", "-1", "--format=%h", "HEAD", "--", "vtui")  # the code drawn
    for name in only or list(DRIVERS):
        entry: dict[str, Any] = {}
        for size in SIZES:
            got = asyncio.run(capture(name, size, out))
            if not got["reached"]:
                entry = got
                break
            entry.setdefault("files", []).extend(got["files"])
            entry.update(reached=True, screen=got["screen"])
            entry.setdefault("svg_bytes", {})[f"{size[0]}x{size[1]}"] = got["svg_bytes"]
        index[name] = entry
        print(
            f"{side} {name}: {'ok ' + entry['screen'] if entry.get('reached') else entry['why']}", flush=True
        )
    index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return 0


# -- the parent: both sides, then the README ------------------------------------------------------------
def run_side(side: str, checkout: Path, out: Path, only: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="vtui-screens-") as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": str(checkout),
            "VTUI_SCREENS_CHECKOUT": str(checkout),
            "VTUI_STATE_DIR": f"{tmp}/state",
            "VTUI_CONFIG_DIR": f"{tmp}/config",
            "XDG_STATE_HOME": f"{tmp}/xdg-state",
            "XDG_CONFIG_HOME": f"{tmp}/xdg-config",
            "XDG_CACHE_HOME": f"{tmp}/xdg-cache",
            "TZ": "UTC",
        }
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", side, "--out", str(out / side)]
        subprocess.run([*argv, *(["--only", *only] if only else [])], env=env, cwd=checkout, check=True)


def _text_block(path: Path) -> str:
    return "```text\n" + path.read_text(encoding="utf-8").rstrip("\n") + "\n```\n"


def _cell(side: str, name: str, entry: dict[str, Any], w: int, h: int) -> str:
    if not entry.get("reached"):
        return "not in this version" if entry else "not captured"
    links = []
    for ext in ("svg", "txt"):
        stem = f"{name}-{w}x{h}.{ext}"
        if stem in entry["files"]:
            links.append(f"[{ext}]({side}/{stem})")
        elif ext == "svg":
            links.append(f"svg left out ({entry['svg_bytes'][f'{w}x{h}'] // 1000} KB > 100 KB)")
    return " · ".join(links)


def write_readme(out: Path) -> None:
    index = {side: json.loads((out / side / "index.json").read_text()) for side in ("before", "after")}
    reached = {side: {n for n in SCREENS if index[side].get(n, {}).get("reached")} for side in index}
    only_after = [n for n in SCREENS if n in reached["after"] and n not in reached["before"]]
    lines = [
        "# vtui screens, before and after dashboard v2 (issue 15)",
        "",
        f"Before: commit {index['before']['_commit']} (the parent of c9ed4b4, the first "
        f'"Dashboard v2: fleet table" commit). After: {index["after"]["_commit"]} (its vtui/ is '
        f"{index['after']['_vtui_commit']}'s, main's at the time). Made by "
        "`python benchmarks/screens_before_after.py` (before: `git worktree add /tmp/screens-before "
        "2cf1f06`): each checkout's own app (its `make_app` on the fake supervisor; four instances, "
        "a fixed clock, the same fixed metrics and GPU samples, 5 min of history) driven by Textual's "
        "Pilot with the keys a user presses, captured as SVG and plain text at 120x40 and 80x24. An "
        "80x24 SVG over 100 KB is left out (its text is kept). Modal dialogs show alone: vtui's "
        "stylesheet gives every screen, modals too, a solid background.",
        "",
        f"Before and after: {', '.join(f'`{n}`' for n in SCREENS if n in reached['before'])}.",
        f"After only (not in the before code): {', '.join(f'`{n}`' for n in only_after)}.",
        "The planner has no screen of its own in either version: its panel is in the flag editor "
        "(`flags`), and the presets come from it.",
        "",
        "| screen | before | after |",
        "|---|---|---|",
    ]
    for name, (title, _, _) in SCREENS.items():
        marks = ["yes" if name in reached[side] else "—" for side in ("before", "after")]
        lines.append(f"| [{title}](#{name}) | {marks[0]} | {marks[1]} |")
    lines.append("")
    for name, (title, how, changed) in SCREENS.items():
        lines += [
            f'<a id="{name}"></a>',
            f"## {title} (`{name}`)",
            "",
            f"How: {how}. {changed}",
            "",
            "| size | before | after |",
            "|---|---|---|",
        ]
        for w, h in SIZES:
            cells = [_cell(side, name, index[side].get(name, {}), w, h) for side in ("before", "after")]
            lines.append(f"| {w}x{h} | {cells[0]} | {cells[1]} |")
        why = [
            f"{side}: {index[side][name]['why']}"
            for side in index
            if not index[side].get(name, {}).get("reached", True)
        ]
        lines += ([""] + [f"_{w}_" for w in why] if why else []) + [""]
    lines += ["## Seen in the after pictures", "", *[f"- {o}" for o in OBSERVATIONS], ""]
    lines += ["## The dashboard and the detail screen at 80x24, as text", ""]
    for name in ("dashboard", "detail"):
        for side in ("before", "after"):
            path = out / side / f"{name}-80x24.txt"
            if path.exists():
                lines += [f"### {name}, {side}", "", _text_block(path)]
    (out / "README.md").write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, default=Path("/tmp/screens-before"))
    ap.add_argument("--after", type=Path, default=ROOT)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "screens")
    ap.add_argument("--only", nargs="+", default=[], choices=sorted(DRIVERS), help="these screens only")
    ap.add_argument("--side", choices=("before", "after"), help="one side only (then the README)")
    ap.add_argument("--readme", action="store_true", help="only write README.md from the index files")
    ap.add_argument("--child", choices=("before", "after"), help=argparse.SUPPRESS)
    # a smoke run: this checkout on both sides, the dashboard only, into a scratch folder (out=None)
    _smoke.tiny(ap, before=ROOT, out=None, only=["dashboard"])
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="vtui-screens-smoke-"))
    if args.child:
        return child(args.child, args.out, args.only)
    for side, checkout in (("before", args.before), ("after", args.after)):
        if args.side in (None, side) and not args.readme:
            if not (checkout / "vtui" / "ui" / "app.py").exists():
                print(f"{checkout}: not a vtui checkout (for before: git worktree add {checkout} 2cf1f06)")
                return 2
            run_side(side, checkout.resolve(), args.out.resolve(), args.only)
    write_readme(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
