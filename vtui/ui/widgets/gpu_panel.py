"""The GPU panel, as nvitop draws it: per GPU a solid memory bar and a utilization bar coloured by load
(with the percentage and a `!`/`!!` level marker beside each: colour is never the only cue), then a
per-process table: PID, GPU, the vtui instance holding it (or "other"), its GPU memory in GiB and the
command. Simulated GPUs (vtui.sim.gpuview) are drawn the same way; what a simulation cannot know
(utilization, temperature, power) is `--`. The command is the process's own command line (the NVML
sampler reads it with psutil), else the instance's command line, else `--` (an "other" process on a
simulated GPU)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.style import Style
from rich.text import Text
from textual.dom import NoScreen
from textual.widget import Widget

from vtui.core.status import HostState
from vtui.telemetry.gpu import GpuInfo, GpuSample
from vtui.ui import fmt
from vtui.ui.widgets.palette import Palette, bar, level_mark, palette_of

PROCESS_ROWS = 8  # most process rows shown; "+N more" after them


def _bar(out: Text, fraction: float | None, width: int, pal: Palette) -> None:
    filled, empty = bar(fraction, width)
    out.append(filled, style=pal.level(fraction))
    out.append(empty, style=pal.empty)


def _pct(fraction: float | None) -> str:
    return (fmt.pct(fraction) + level_mark(fraction)) if fraction is not None else fmt.DASH


def gpu_line(gpu: GpuInfo, width: int, pal: Palette) -> Text:
    """`GPU0 H200       MEM ████▌░░ 80.0/141.0G  57%   UTIL ██▊░░  88%   61C 420/700W`"""
    out = Text()
    out.append(f"GPU{gpu.index:<2} {(gpu.name or '?').removeprefix('NVIDIA ')[:10]:<10} ", style=pal.bold)
    mem = gpu.memory_used / gpu.memory_total if gpu.memory_used is not None and gpu.memory_total else None
    util = gpu.utilization / 100 if gpu.utilization is not None else None
    mem_text = f" {fmt.gib(gpu.memory_used):>5}/{fmt.gib(gpu.memory_total):>5}G {_pct(mem):>5}"
    util_text = f" {_pct(util):>5}"
    tail = f"  {fmt.num(gpu.temperature):>3}C {fmt.num(gpu.power_w):>4}/{fmt.num(gpu.power_limit_w):>4}W"
    fixed = out.cell_len + 4 + len(mem_text) + 7 + len(util_text)
    if width < 100:  # narrow: no temperature/power (the same for every GPU: the bars line up)
        tail = ""
    room = width - fixed - len(tail)
    mem_w = max(6, room * 3 // 5)
    util_w = max(4, room - mem_w)
    out.append("MEM ", style=pal.muted)
    _bar(out, mem, mem_w, pal)
    out.append(mem_text, style=pal.level(mem) if mem is not None and mem >= 0.75 else Style())
    out.append("  UTIL ", style=pal.muted)
    _bar(out, util, util_w, pal)
    out.append(util_text, style=pal.level(util) if util is not None and util >= 0.75 else Style())
    out.append(tail, style=pal.muted)
    out.truncate(width)
    return out


def gpu_text(
    sample: GpuSample | None,
    names: list[str],
    width: int,
    commands: Mapping[str, str] | None = None,
    pal: Palette | None = None,
    process_rows: int = PROCESS_ROWS,
) -> Text:
    pal = pal or palette_of(None)
    if sample is None:
        return Text("GPUs: waiting for the first sample...", style=pal.muted)
    if not sample.available:
        return Text(
            f"GPUs: none ({sample.reason or 'no NVIDIA driver'}); instances run on CPU or sim", style=pal.warn
        )
    commands = commands or {}
    lines = [gpu_line(gpu, width, pal) for gpu in sample.gpus]
    name_w = max(8, min(16, max((len(n) for n in names), default=8)))
    head = Text(
        f"{'PID':>8}  GPU  {'INSTANCE':<{name_w}} {'GPU MEM':>9}  COMMAND", style=pal.bold + pal.muted
    )
    if len(sample.processes) > process_rows:  # said in the header: a short panel clips its last line
        head.append(f"  ({process_rows} of {len(sample.processes)} processes)", style=pal.muted)
    head.truncate(width)
    lines.append(head)
    order = {n: i for i, n in enumerate(names)}
    procs = sorted(
        sample.processes,
        key=lambda p: (p.gpu_index, order.get(p.instance or "", len(order)), -(p.used_memory or 0), p.pid),
    )
    for p in procs[:process_rows]:
        line = Text(f"{p.pid:>8}  {p.gpu_index:>3}  ")
        owner = p.instance or "other"
        line.append(f"{owner[:name_w]:<{name_w}} ", style=pal.accent if p.instance else pal.muted)
        line.append(f"{fmt.gib(p.used_memory):>5} GiB  ")
        line.append(fmt.one_line(p.command or commands.get(p.instance or "", fmt.DASH)), style=pal.muted)
        line.truncate(width)
        lines.append(line)
    if len(procs) > process_rows:
        lines.append(Text(f"  +{len(procs) - process_rows} more processes", style=pal.muted))
    if not procs:
        lines.append(Text("  no processes on the GPUs", style=pal.muted))
    if sample.reason:  # e.g. "simulated GPUs (no NVIDIA driver)"
        lines.append(Text(f"  {sample.reason}: utilization, temperature, power --", style=pal.muted))
    return Text("\n").join(lines)


HOST_PROCESS_ROWS = 3  # with other hosts shown, each host's process table is this short


def host_heading(label: str, host: HostState | None, pal: Palette, width: int = 200) -> Text:
    """`── gpu2 ──` above a host's GPUs (with `vtui --host`); a lost link says so and why."""
    out = Text(f"── {label} ", style=pal.bold)
    if host is not None and not host.connected:
        out.append(host.state.upper(), style=pal.bad + pal.bold)
        if host.detail:
            out.append(f": {host.detail}", style=pal.muted)
    out.truncate(width)
    return out


def hosts_text(
    local: GpuSample | None,
    hosts: Sequence[tuple[HostState, GpuSample | None]],
    names: list[str],
    width: int,
    commands: Mapping[str, str] | None = None,
    pal: Palette | None = None,
) -> Text:
    """This machine's GPUs, then each other host's, each under its heading."""
    pal = pal or palette_of(None)
    parts = [
        host_heading("local", None, pal, width),
        gpu_text(local, names, width, commands, pal, HOST_PROCESS_ROWS),
    ]
    for host, sample in hosts:
        parts.append(host_heading(host.label, host, pal, width))
        if host.connected or sample is not None:
            parts.append(gpu_text(sample, names, width, commands, pal, HOST_PROCESS_ROWS))
    return Text("\n").join(parts)


class GpuPanel(Widget):
    """Repaints without a layout pass unless the number of lines changed."""

    DEFAULT_CSS = "GpuPanel { height: auto; }"

    def __init__(self) -> None:
        super().__init__(id="gpu-panel")
        self._sample: GpuSample | None = None
        self._names: list[str] = []
        self._commands: Mapping[str, str] = {}
        self._hosts: tuple[tuple[HostState, GpuSample | None], ...] = ()
        self._text = Text()
        self._lines = 0
        self._key: tuple | None = None

    def update_sample(
        self,
        sample: GpuSample | None,
        names: list[str],
        commands: Mapping[str, str] | None = None,
        hosts: Sequence[tuple[HostState, GpuSample | None]] = (),
    ) -> None:
        """`hosts`: other hosts' links and GPU samples (`vtui --host`), drawn under this machine's."""
        self._sample, self._names, self._hosts = sample, names, tuple(hosts)
        if commands is not None:
            self._commands = commands
        self._rerender()

    def _rerender(self) -> None:
        try:
            height = self.screen.size.height
        except NoScreen:  # a repaint that fired while the dashboard is being taken down
            return
        rows = PROCESS_ROWS if height >= 30 else 3
        sample = self._sample
        key = (
            (sample.available, sample.reason, sample.gpus, sample.processes) if sample else None,
            tuple(self._names),
            len(self._commands),
            tuple((h, (s.available, s.gpus, s.processes) if s else None) for h, s in self._hosts),
            self.content_size.width,
            rows,
            self.app.theme,
        )
        if key == self._key:  # a new sample with the same figures: nothing to draw
            return
        self._key = key
        if self._hosts:
            text = hosts_text(
                self._sample,
                self._hosts,
                self._names,
                self.content_size.width or 78,
                self._commands,
                palette_of(self.app),
            )
        else:
            text = gpu_text(
                self._sample,
                self._names,
                self.content_size.width or 78,
                self._commands,
                palette_of(self.app),
                rows,
            )
        if text != self._text:
            lines = text.plain.count("\n") + 1
            relayout = lines != self._lines
            self._text, self._lines = text, lines
            self.refresh(layout=relayout)

    def render(self) -> Text:
        return self._text

    def on_resize(self) -> None:
        self._rerender()
