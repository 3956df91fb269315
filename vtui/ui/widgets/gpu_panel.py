"""Per-GPU memory bar split by the instance holding it (and "other"), utilization, temperature, power."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from vtui.telemetry.gpu import GpuSample
from vtui.ui import fmt

PALETTE = ("cyan", "magenta", "green", "yellow", "blue", "bright_red", "bright_cyan", "bright_magenta")


def instance_marks(names: list[str]) -> dict[str, str]:
    """A distinct ASCII letter per instance (its initial when free), for the memory bars and legend."""
    marks: dict[str, str] = {}
    used = {"+", "."}
    for name in names:
        for ch in name.lower() + "abcdefghijklmnopqrstuvwxyz0123456789":
            if ch.isalnum() and ch not in used:
                marks[name] = ch
                used.add(ch)
                break
    return marks


def gpu_text(sample: GpuSample | None, names: list[str], width: int) -> Text:
    if sample is None:
        return Text("GPUs: waiting for the first sample...", style="dim")
    if not sample.available:
        return Text(
            f"GPUs: none ({sample.reason or 'no NVIDIA driver'}); instances run on CPU or sim", style="yellow"
        )
    marks = instance_marks(names)
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    out = Text()
    bar_w = max(10, width - 56)
    for gpu in sample.gpus:
        if out:
            out.append("\n")
        label = f"GPU{gpu.index} {(gpu.name or '?').removeprefix('NVIDIA ')[:10]:<10} "
        out.append(label, style="bold")
        total = gpu.memory_total
        out.append("[")
        if total:
            by_owner: dict[str | None, int] = {}
            for p in sample.processes:
                if p.gpu_index == gpu.index and p.used_memory:
                    by_owner[p.instance] = by_owner.get(p.instance, 0) + p.used_memory
            attributed = sum(by_owner.values())
            other = max(0, (gpu.memory_used or 0) - attributed) + by_owner.pop(None, 0)
            cells = 0
            for owner in [n for n in names if n in by_owner] + [None]:
                mem = other if owner is None else by_owner[owner]
                n = min(bar_w - cells, round(mem / total * bar_w))
                if n > 0:
                    out.append(
                        (marks.get(owner, "?") if owner else "+") * n,
                        style=colors.get(owner, "white") if owner else "dim",
                    )
                    cells += n
            out.append("." * (bar_w - cells), style="dim")
        else:
            out.append("-" * bar_w, style="dim")
        out.append("] ")
        out.append(f"{fmt.gib(gpu.memory_used)}/{fmt.gib(gpu.memory_total)}G ")
        out.append(
            f"util {fmt.num(gpu.utilization):>3}% {fmt.num(gpu.temperature):>3}C "
            f"{fmt.num(gpu.power_w):>3}/{fmt.num(gpu.power_limit_w)}W"
        )
    legend = Text(
        "  ".join(f"{marks[n]}={n}" for n in names if n in marks) + "  +=other  .=free", style="dim"
    )
    legend.truncate(width)
    out.append("\n")
    out.append_text(legend)
    return out


class GpuPanel(Widget):
    """Repaints without a layout pass unless the number of lines changed."""

    def __init__(self) -> None:
        super().__init__(id="gpu-panel")
        self._sample: GpuSample | None = None
        self._names: list[str] = []
        self._text = Text()

    def update_sample(self, sample: GpuSample | None, names: list[str]) -> None:
        self._sample, self._names = sample, names
        self._rerender()

    def _rerender(self) -> None:
        text = gpu_text(self._sample, self._names, self.content_size.width or 78)
        if text != self._text:
            relayout = len(text.plain.splitlines()) != len(self._text.plain.splitlines())
            self._text = text
            self.refresh(layout=relayout)

    def render(self) -> Text:
        return self._text

    def on_resize(self) -> None:
        self._rerender()
