"""Textual's Footer, recomposed once per change of what it shows.

Textual's Footer answers every `refresh_bindings` (a focus change, a screen's greyed-out keys) with a
recompose after the next refresh: one per call, though several calls in one frame (focus, selection and
state at a dashboard's start come in pairs and triples) show the same keys, and a recompose remounts
every key (some 30 widgets on the dashboard: 30-60 ms each time on a quiet machine, seven of them in the
dashboard's first second, `benchmarks/bench_ui_vs_htop.py`). This one recomposes once per burst of calls
(at the next turn of its message loop, so the keys are drawn in the coming frame, not the one after), and
only when the keys it would show (key, label, enabled, tooltip) differ from those it shows.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer

from vtui.ui.textual_private import mark_footer_ready


class LeanFooter(Footer):
    """The Footer, minus the recomposes that would draw the same keys."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending = False
        self._shown: tuple[object, ...] | None = None

    def bindings_changed(self, screen: Screen) -> None:
        mark_footer_ready(self)
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen and not self._pending:
            self._pending = True
            self.call_later(self._recompose_if_changed)  # (not after the next refresh: drawn in it)

    async def _recompose_if_changed(self) -> None:
        self._pending = False
        if not self.is_attached:
            return
        shown = self._keys()
        if shown == self._shown:
            return
        self._shown = shown
        await self.recompose()

    def _keys(self) -> tuple[object, ...]:
        """What compose() reads: the shown bindings in order, with their state."""
        app = self.app
        return (
            self.show_command_palette and app.ENABLE_COMMAND_PALETTE,
            app.COMMAND_PALETTE_BINDING,
            *(
                (
                    binding.key,
                    app.get_key_display(binding),
                    binding.description,
                    binding.action,
                    binding.group,
                    binding.show,
                    binding.tooltip,
                    enabled,
                    tooltip,
                )
                for _, binding, enabled, tooltip in self.screen.active_bindings.values()
                if binding.show or binding.key == app.COMMAND_PALETTE_BINDING
            ),
        )
