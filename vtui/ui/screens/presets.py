"""Pick preset A (throughput-first) or B (latency-first) for an instance; the diff follows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from vtui.core.model import InstanceSpec
from vtui.ui import fmt
from vtui.ui.keymap import PRESET_BINDINGS
from vtui.ui.presets import PRESETS, apply_preset, preset_flags

if TYPE_CHECKING:
    from textual import getters

    from vtui.ui.app import VtuiApp


class PresetScreen(ModalScreen[None]):
    if TYPE_CHECKING:
        app = getters.app(VtuiApp)

    BINDINGS = [*PRESET_BINDINGS]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.instance = name

    def _model_len(self) -> int | None:
        """The model's own limit (its config's derived max_model_len), once the planner has read it."""
        loaded = self.app.model_configs.get(self._spec())
        config = loaded[0] if loaded is not None else None
        return config.max_position_embeddings if config is not None else None

    def _spec(self) -> InstanceSpec:
        return self.app.store.views[self.instance].spec or self.app.store.layout.instance(self.instance)

    def compose(self) -> ComposeResult:
        spec = self._spec()
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
            yield Static(
                "a/b: review the diff, then restart   escape: cancel (esc closes)", classes="dialog-keys"
            )

    def action_apply(self, key: str) -> None:
        new = apply_preset(key, self._spec(), self._model_len())
        self.dismiss(None)
        self.app.control.review_and_restart(self.instance, new, note=f"preset {key}")

    def action_close(self) -> None:
        self.dismiss(None)
