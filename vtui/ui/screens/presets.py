"""Pick preset A (throughput-first) or B (latency-first) for an instance; the diff follows."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from vtui.ui import fmt
from vtui.ui.adapters import fact
from vtui.ui.keymap import PRESET_BINDINGS
from vtui.ui.presets import PRESETS, preset_flags


class PresetScreen(ModalScreen[None]):
    BINDINGS = [*PRESET_BINDINGS]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.instance = name

    def _model_len(self) -> int | None:
        view = self.app.store.views[self.instance]
        return fact(view.facts, "model_max_len", "derived_max_model_len")

    def compose(self) -> ComposeResult:
        view = self.app.store.views[self.instance]
        spec = view.spec or self.app.store.layout.instance(self.instance)
        text = Text(
            f"Presets for {self.instance} ({len(spec.gpus) or 'no'} GPU(s), {spec.model})\n\n", style="bold"
        )
        for p in PRESETS:
            flags = preset_flags(p.key, spec, self._model_len())
            text.append(f"[{p.key.lower()}] {p.key}: {p.title}\n", style="bold cyan")
            text.append(f"    {p.summary}\n    ")
            text.append(
                " ".join(f"--{k} {fmt.flag_value(v)}" for k, v in flags.items()) + "\n\n", style="green"
            )
        with Vertical(classes="dialog"):
            yield Static(text)
            yield Static("a/b: review the diff, then restart   escape: cancel", classes="dialog-keys")

    def action_apply(self, key: str) -> None:
        view = self.app.store.views[self.instance]
        spec = view.spec or self.app.store.layout.instance(self.instance)
        new = spec.with_flags(preset_flags(key, spec, self._model_len()))
        self.dismiss(None)
        self.app.review_and_restart(self.instance, new, note=f"preset {key}")

    def action_close(self) -> None:
        self.dismiss(None)
